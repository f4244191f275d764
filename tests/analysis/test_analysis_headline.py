"""analysis.headline, analysis.summary_page and analysis.summary_format on hand-worked tables (the
expected numbers are worked out by hand)."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.headline import (
    SELECTED_BY_SCORE,
    SELECTED_BY_SPEEDUP,
    headline_table,
    token_savings,
)
from analysis.io import best_responses_frame
from analysis.summary_format import percent
from analysis.summary_page import method_order, render_headline_markdown

pytestmark = pytest.mark.filterwarnings("error")

PAIR = "gen / rm"
NAN = math.nan
# The BoN ladder: Bo32 (compute 1, score 100), Bo64 (2, 120), Bo128 (4, 140).
BON = [(32, 1.0, 100.0), (64, 2.0, 120.0), (128, 4.0, 140.0)]


def summary_frame() -> pd.DataFrame:
    rows = [{"pair_key": "gen--rm", "pair": PAIR, "generator": "gen", "reward": "rm", "method": "bon", "n": n,
             "setting": f'{{"n":{n}}}', "method_label": f"Bo{n}", "improvement": score, "relative_compute": compute,
             "n_prompts": 20, "n_prompts_improvement": 19, "zero_spread_prompts": "p7",
             "confidence_level": 0.95, "bootstrap_resamples": 1000} for n, compute, score in BON]
    return pd.DataFrame(rows)


def sr_row(alpha, improvement, relative_compute, status, compute=NAN, low=NAN, high=NAN, extrapolated=NAN,
           speedup_low=NAN, speedup_high=NAN, in_range=1.0) -> dict:
    speedup = compute / relative_compute
    return {"pair_key": "gen--rm", "pair": PAIR, "generator": "gen", "reward": "rm", "method": "sr", "n": 128,
            "setting": f'{{"alpha":{alpha}}}', "method_label": f"SR α={alpha:g}", "improvement": improvement,
            "improvement_lo": improvement - 5, "improvement_hi": improvement + 5,
            "relative_compute": relative_compute, "relative_compute_lo": relative_compute - 0.1,
            "relative_compute_hi": relative_compute + 0.1, "bon_equivalent_compute": compute,
            "bon_equivalent_status": status, "bon_equivalent_compute_extrapolated": extrapolated,
            "compute_speedup": speedup, "compute_speedup_extrapolated": extrapolated / relative_compute,
            "compute_speedup_lo": speedup_low, "compute_speedup_hi": speedup_high,
            "bon_equivalent_compute_lo": low, "bon_equivalent_compute_hi": high,
            "bon_equivalent_in_range_frac": in_range, "n_prompts": 20, "n_prompts_improvement": 19,
            "zero_spread_prompts": "p7", "confidence_level": 0.95, "bootstrap_resamples": 1000}


def two_alpha_frame() -> pd.DataFrame:
    """α=0.5 inside the ladder (BoN-equivalent 3.0 at compute 1.5: speedup 2.0); α=0.9 scores
    higher but above Bo128, extrapolated to compute 10 (speedup 10 / 2 = 5, larger, yet not measured)."""
    return pd.DataFrame([
        sr_row(0.5, 130.0, 1.5, "interpolated", compute=3.0, low=2.5, high=3.5, speedup_low=1.5,
               speedup_high=2.5, in_range=0.9),
        sr_row(0.9, 160.0, 2.0, "above_range", extrapolated=10.0, in_range=0.0),
    ])


def test_best_alpha_is_the_interpolated_one_and_equivalent_n_is_compute_times_n_min():
    table = headline_table(summary_frame(), two_alpha_frame())
    assert table["method_label"].tolist() == ["SR α=0.5", "SR α=0.9"]
    assert table["best"].tolist() == [True, False]
    assert table["in_range"].tolist() == [True, False]
    assert set(table["selection"]) == {SELECTED_BY_SPEEDUP}
    best = table.iloc[0]
    assert best["equivalent_n"] == pytest.approx(3.0 * 32)  # ≈ Bo96
    assert (best["equivalent_n_lo"], best["equivalent_n_hi"]) == pytest.approx((2.5 * 32, 3.5 * 32))
    assert best["compute_speedup"] == pytest.approx(2.0)
    # On the N axis, 130 is halfway (in log N) between Bo64's 120 and Bo128's 140: 64·√2.
    assert best["equivalent_n_by_score"] == pytest.approx(64 * math.sqrt(2))
    above = table.iloc[1]
    assert math.isnan(above["equivalent_n"]) and above["equivalent_n_extrapolated"] == pytest.approx(320.0)
    assert (best["bon_min_n"], best["bon_max_n"], best["bon_max_improvement"]) == (32, 128, 140.0)
    assert best["bon_ladder"].startswith("Bo32 1.0 (N ratio 1.0), Bo64 2.0 (N ratio 2.0)")


def test_best_is_the_highest_speedup_not_the_highest_score_among_interpolated():
    frame = pd.DataFrame([
        sr_row(0.5, 130.0, 1.5, "interpolated", compute=3.0),  # speedup 2.0
        sr_row(0.7, 135.0, 2.5, "interpolated", compute=3.75),  # higher score, speedup 1.5
    ])
    assert headline_table(summary_frame(), frame)["best"].tolist() == [True, False]


def test_without_an_interpolated_alpha_the_highest_score_is_picked_and_marked_out_of_range():
    frame = pd.DataFrame([
        sr_row(0.5, 90.0, 1.5, "below_range", extrapolated=0.5),
        sr_row(0.9, 160.0, 2.0, "above_range", extrapolated=10.0),
    ])
    table = headline_table(summary_frame(), frame)
    assert table["best"].tolist() == [False, True]
    assert not table["in_range"].any() and set(table["selection"]) == {SELECTED_BY_SCORE}
    page = render_headline_markdown(table)
    assert "No setting of sr lands inside the measured Best-of-N curve" in page  # no display: the method's name
    assert "above the largest Best-of-N (Bo128 = 140)" in page
    assert "below Bo32 (100), the cheapest Best-of-N" in page
    assert "≈ Bo320" in page and "extrapolated" in page


def test_below_the_cheapest_best_of_n_nothing_is_extrapolated():
    """A setting scoring below Bo-N_min: "below Bo32", never a Best-of-N below the ladder (a "Bo0")."""
    frame = pd.DataFrame([sr_row(0.5, 90.0, 1.5, "below_range", extrapolated=0.03)])
    table = headline_table(summary_frame(), frame)
    row = table.iloc[0]
    for column in ("bon_equivalent_compute_extrapolated", "equivalent_n_extrapolated", "compute_speedup_extrapolated"):
        assert math.isnan(row[column]), column
    page = render_headline_markdown(table)
    statement = page.split(f"## {PAIR}")[1].split("\n\n")[2]  # after the table
    assert statement == ("No setting of sr lands inside the measured Best-of-N curve (Bo32 = 100 to Bo128 = 140). "
                         "Its highest-scoring: **SR α=0.5** scores 90.0 [85.0, 95.0] (eq. 8; Bo32 = 100) at 1.5× [1.4, 1.6] "
                         "Bo32's compute, below Bo32 (100), the cheapest Best-of-N.")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    header, cells = rows[0], dict(zip(rows[0], rows[2], strict=True))
    assert cells["≈ Best-of-N"] == "below Bo32" and cells["where"] == "below Bo32"
    assert cells["speedup at equal score"] == "--" and cells["BoN-equivalent compute (× Bo32)"] == "--", header
    assert "Out of range: SR α=0.5 scores below Bo32 (100), the cheapest Best-of-N; no Best-of-N is cheaper" in page
    for nonsense in ("Bo0", "Bo1 ", "0.03", "Extending the end segment", "(extrapolated)"):
        assert nonsense not in page, nonsense


def runs_frame(sr_generated, first_decision=10.0, min_tokens=8) -> pd.DataFrame:
    """Per prompt: the largest BoN's length (tokens / candidates), a smaller BoN with another
    length (must be ignored), and SR with b_init 64 and the given tokens per α."""
    rows = []
    lengths = {"p1": 50.0, "p2": 25.0}
    for prompt, length in lengths.items():
        rows.append({"pair": PAIR, "method": "bon", "n": 128, "setting": '{"n":128}', "method_label": "Bo128",
                     "prompt_id": prompt, "method_name": "Best-of-N", "reference": True,
                     "tokens_generated": 128 * length, "num_candidates": 128, "init_batch_size": NAN,
                     "min_tokens": NAN, "first_decision_token": NAN})
        rows.append({"pair": PAIR, "method": "bon", "n": 32, "setting": '{"n":32}', "method_label": "Bo32",
                     "prompt_id": prompt,
                     "tokens_generated": 32 * 999.0, "num_candidates": 32, "init_batch_size": NAN,
                     "min_tokens": NAN, "first_decision_token": NAN})
    for (alpha, prompt), generated in sr_generated.items():
        rows.append({"pair": PAIR, "method": "sr", "n": 64, "setting": f'{{"alpha":{alpha}}}',
                     "method_label": f"SR α={alpha:g}", "prompt_id": prompt, "method_name": "SR", "reference": False,
                     "tokens_generated": generated, "num_candidates": 64, "init_batch_size": 64,
                     "min_tokens": min_tokens, "first_decision_token": first_decision})
    return pd.DataFrame(rows)


def correlation_frame(taus=(8, 10, 16)) -> pd.DataFrame:
    rows = []
    for tau in taus:
        saved = 0.9 - 0.01 * tau  # 0.82 at τ=8, 0.80 at τ=10, 0.74 at τ=16
        rows.append({"pair": PAIR, "tau": tau, "metric": "tokens_saved_frac", "mean": saved,
                     "ci_low": saved - 0.05, "ci_high": saved + 0.05, "n_prompts": 12})
        rows.append({"pair": PAIR, "tau": tau, "metric": "pearson", "mean": 0.1, "ci_low": 0.0,
                     "ci_high": 0.2, "n_prompts": 12})
    return pd.DataFrame(rows)


def test_token_savings_against_best_of_b_init_run_to_completion():
    # p1: 64 × 50 = 3200 tokens for Bo64 to completion; SR generated 800 → saved 0.75.
    # p2: 64 × 25 = 1600; SR generated 1200 → saved 0.25.  Mean 0.5.
    # α=0.9: 400 of 3200 → 0.875 and 400 of 1600 → 0.75; mean 0.8125.
    runs = runs_frame({(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0, (0.9, "p2"): 400.0})
    savings = token_savings(runs, correlation_frame(), n_resamples=200)
    assert savings["method_label"].tolist() == ["SR α=0.5", "SR α=0.9"] and (savings["method"] == "sr").all()
    assert "alpha" not in savings.columns
    assert savings["tokens_saved_frac"].tolist() == pytest.approx([0.5, 0.8125])
    assert savings["n_prompts"].tolist() == [2, 2]
    assert (savings["reference_bon_n"] == 128).all() and (savings["init_batch_size"] == 64).all()
    # Two prompts: every resample mean lies between the two prompts' values.
    first = savings.iloc[0]
    assert 0.25 <= first["tokens_saved_frac_lo"] <= 0.5 <= first["tokens_saved_frac_hi"] <= 0.75
    # The oracle at τ = SR's first decision token (10), not at min_tokens (8).
    assert savings["oracle_tau"].tolist() == [10.0, 10.0] and savings["oracle_tau_exact"].all()
    assert savings["oracle_tokens_saved_frac"].tolist() == pytest.approx([0.80, 0.80])
    assert (savings["oracle_tokens_saved_frac_lo"].iloc[0], savings["oracle_tokens_saved_frac_hi"].iloc[0]) == (
        pytest.approx(0.75), pytest.approx(0.85))


def test_token_savings_uses_only_prompts_every_alpha_answered():
    runs = runs_frame({(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0})
    savings = token_savings(runs, None, n_resamples=0)
    assert savings["n_prompts"].tolist() == [1, 1]
    assert savings["tokens_saved_frac"].tolist() == pytest.approx([0.75, 0.875])
    assert savings["tokens_saved_frac_lo"].isna().all()  # no resamples, no interval
    assert savings["oracle_tokens_saved_frac"].isna().all() and (savings["correlation_taus"] == "").all()


def test_oracle_falls_back_on_min_tokens_and_names_a_missing_tau():
    runs = runs_frame({(0.5, "p1"): 800.0}, first_decision=NAN, min_tokens=8)
    savings = token_savings(runs, correlation_frame(), n_resamples=0)
    assert savings["decision_token_source"].tolist() == ["min_tokens"]
    assert savings["oracle_tau"].tolist() == [8.0] and savings["oracle_tokens_saved_frac"].tolist() == [
        pytest.approx(0.82)]
    # τ = 12 was not studied: the nearest (8 and 16 tie; the smaller) stands in, flagged.
    runs = runs_frame({(0.5, "p1"): 800.0}, first_decision=12.0)
    savings = token_savings(runs, correlation_frame((8, 16, 32)), n_resamples=0)
    assert savings["oracle_tau"].tolist() == [8.0] and not savings["oracle_tau_exact"].any()
    assert savings["correlation_taus"].tolist() == ["8, 16, 32"]
    headline = headline_table(summary_frame(), two_alpha_frame())
    page = render_headline_markdown(headline, savings)
    assert "did not score τ = 12 (its τ: 8, 16, 32)" in page and "τ = 8" in page


def test_markdown_states_the_numbers_and_the_out_of_range_point():
    headline = headline_table(summary_frame(), two_alpha_frame())
    runs = runs_frame({(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0, (0.9, "p2"): 400.0})
    savings = token_savings(runs, correlation_frame(), n_resamples=200)
    page = render_headline_markdown(headline, savings, correlation_resamples=2000)
    assert page.startswith("# ") and f"## {PAIR}" in page
    statement = page.split(f"## {PAIR}")[1].split("\n\n")[2]  # after the table
    assert statement.startswith("**SR α=0.5** scores 130 [125, 135] (eq. 8; Bo32 = 100) at 1.5× [1.4, 1.6]")
    assert "≈ 3.0× [2.5, 3.5] Bo32's compute to match it (≈ Bo96 [80, 112])" in statement
    assert "2.0× [1.5, 2.5] less compute at equal score" in statement
    assert "inside the Best-of-N curve in 90% of the bootstrap resamples" in statement
    assert "**SR α=0.9** scores higher but outside the measured Best-of-N range" in statement
    # The table lists both α, marks the best, and marks the extrapolated values.
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    assert ["**SR α=0.5** (best)", "130 [125, 135]"] == rows[2][:2]
    assert ["SR α=0.9", "160 [155, 165]"] == rows[3][:2] and "(extrapolated) Bo320" in page
    assert "above Bo128" in page
    # Tokens: the oracle bound beside what SR saved.
    assert "first rejection comes at token 10 (b_init = 64, min_tokens = 8)" in page
    assert "saves 80% [75%, 85%] of the generated tokens" in page
    assert "SR α=0.5 50% [" in page and "SR α=0.9 81% [" in page
    # Notes: prompts, zero-spread prompts, out-of-range points, assumption, confidence and resamples.
    assert "Prompts: 20 answered by every configuration; eq. 8 defined on 19." in page
    assert "Zero-spread prompts" in page and "p7" in page
    assert "Out of range: SR α=0.9 scores above the largest Best-of-N (Bo128 = 140)" in page
    assert "extrapolated" in page and "≈ 10× Bo32's compute" in page
    assert "SR α=0.5 falls outside the Best-of-N curve in 10% of the resamples" in page
    assert "proportion to N" in page
    assert "95% percentile intervals" in page and "1000 resamples" in page and "2000 resamples" in page
    # 130 read on the N axis is Bo91, not Bo96: more than 10% apart? No (5.7%), so no such note.
    assert "Read on the N axis" not in page


def test_markdown_for_a_speedup_below_one():
    frame = pd.DataFrame([sr_row(0.5, 110.0, 3.0, "interpolated", compute=1.5, speedup_low=0.4, speedup_high=0.6)])
    frame["zero_spread_prompts"] = np.nan  # as read back from the CSV when no prompt lacks a spread
    page = render_headline_markdown(headline_table(summary_frame(), frame))
    assert "a speedup of only 0.50× [0.40, 0.60] at equal score" in page
    assert "Zero-spread" not in page
    # Read on the N axis 110 is Bo32·√2 ≈ Bo45, compute × 32 gives Bo48: within 10%, no note.
    assert "Read on the N axis" not in page


def test_runs_frame_carries_what_token_savings_needs():
    merged_bon = {"prompt_id": "p1", "prompt": "Hi", "method": "bon",
                  "params": {"n": 64, "shards": 2, "model": "gen", "reward": "rm",
                             "setting": {"method": "bon", "params": {"n": 64}, "label": "Bo64"}},
                  "best": {"candidate_id": 3, "score": 1.0, "num_tokens": 5}, "worst": {"score": 0.0},
                  "candidates": [{"id": 3, "num_tokens": 5, "final_score": 1.0}], "num_candidates": 64,
                  "rounds": [], "tokens": {"generated": 3200, "scored": 3200}, "timing": {"total_s": 1.0, "compute_s": 1.0}}
    sr = {"prompt_id": "p1", "prompt": "Hi", "method": "sr",
          "params": {"alpha": 0.5, "init_batch_size": 4, "min_tokens": 8, "model": "gen", "reward": "rm",
                     "setting": {"method": "sr", "params": {"alpha": 0.5}, "label": "SR α=0.5"}},
          "best": {"candidate_id": 0, "score": 1.0, "num_tokens": 5},
          "candidates": [{"id": i, "num_tokens": 5, "final_score": 1.0 if i == 0 else None} for i in range(4)],
          "rounds": [{"decision_token": 10, "batch_before": 4, "batch_after": 2},
                     {"decision_token": 30, "batch_before": 2, "batch_after": 1}],
          "tokens": {"generated": 70, "scored": 50}, "timing": {"total_s": 1.0, "compute_s": 1.0}}
    runs = best_responses_frame([merged_bon, sr])
    bon, spec = runs.iloc[0], runs.iloc[1]
    assert bon["num_candidates"] == 64 and bon["tokens_generated"] / bon["num_candidates"] == 50
    assert math.isnan(bon["init_batch_size"]) and math.isnan(bon["first_decision_token"])
    assert (spec["num_candidates"], spec["init_batch_size"], spec["min_tokens"], spec["first_decision_token"]) == (
        4, 4, 8, 10)


def test_a_limit_censored_at_the_curve_end_reads_as_a_bound():
    row = sr_row(0.5, 130.0, 1.5, "interpolated", compute=3.0, low=2.5, high=4.0, speedup_low=1.7,
                 speedup_high=2.7, in_range=0.8)
    page = render_headline_markdown(headline_table(summary_frame(), pd.DataFrame([{
        **row, "compute_speedup_hi_is_bound": True, "compute_speedup_lo_is_bound": False}])))
    assert "2.0× [1.7, ≥ 2.7]" in page and "Bo96 [80, ≥ 128]" in page
    assert "censored at the curve's end" in page
    plain = render_headline_markdown(headline_table(summary_frame(), pd.DataFrame([row])))
    assert "2.0× [1.7, 2.7]" in plain and "≥" not in plain.split("## Notes")[0].split("|")[0]


def test_adaptive_rows_are_never_the_best_alpha_and_get_their_own_section():
    # SR δ=0.05 is inside the ladder with a higher speedup (BoN-equivalent 3.8 at compute 1.2: 3.2x) than
    # α=0.5 (2.0x), yet the best α is the paper's method's: α=0.5.
    adaptive = sr_row(0.5, 135.0, 1.2, "interpolated", compute=3.8, low=3.0, high=4.0, speedup_low=2.0,
                      speedup_high=3.5) | {"method": "sr-adaptive", "setting": '{"alpha":0.5,"delta":0.05}',
                                           "method_label": "SR δ=0.05"}
    bon_equivalent = pd.concat([two_alpha_frame(), pd.DataFrame([adaptive])], ignore_index=True)
    table = headline_table(summary_frame(), bon_equivalent)
    assert list(table["method_label"]) == ["SR α=0.5", "SR α=0.9", "SR δ=0.05"]
    # adaptive SR is a method of its own: SR's best α is α=0.5, and δ=0.05 is sr-adaptive's best
    assert list(table["best"]) == [True, False, True]
    assert list(table["method"]) == ["sr", "sr", "sr-adaptive"]
    against = pd.DataFrame([{"pair": PAIR, "method_label": "SR δ=0.05", "delta": 0.05, "improvement": 135.0,
                             "relative_compute": 1.2, "status": "below_range", "fixed_alpha_improvement": NAN,
                             "gap": NAN, "gap_lo": NAN, "gap_hi": NAN, "in_range_frac": NAN, "dominated_by": "",
                             "dominates": "SR α=0.5"}])
    survival = pd.DataFrame([{"pair": PAIR, "tau": 8, "delta": 0.05, "adaptive_kept_frac": 0.5,
                              "adaptive_kept_frac_min": 0.25, "adaptive_kept_frac_max": 0.75, "equal_alpha": 0.5,
                              "adaptive_best_survives": 0.9, "adaptive_best_survives_lo": 0.8,
                              "adaptive_best_survives_hi": 1.0, "fixed_best_survives": 0.8,
                              "fixed_best_survives_lo": 0.7, "fixed_best_survives_hi": 0.9,
                              "survives_difference": 0.1, "survives_difference_lo": 0.0,
                              "survives_difference_hi": 0.2}])
    fits = pd.DataFrame([{"pair": PAIR, "tau": 8, "slope": 0.5, "sigma": 0.25, "margin_per_z": 1.0, "prompts": 10}])
    page = render_headline_markdown(table, adaptive=against, survival=survival, fits=fits)
    assert "**SR α=0.5** scores 130" in page  # the statement names the fixed α
    section = page[page.index("### Adaptive rejection"):]
    assert "**SR δ=0.05**: 135 [130, 140] at 1.2× [1.1, 1.3] compute; speedup at equal score 3.2× [2.0, 3.5]" in section
    assert "(best fixed α, SR α=0.5: 130 [125, 135] at 1.5× [1.4, 1.6], 2.0× [1.5, 2.5])" in section
    assert "cheaper than every fixed α" in section and "it dominates SR α=0.5" in section
    assert "50% (25%–75%)" in section and " 0.50 |" in section  # rows kept by the rule; the equal α
    assert "+10.0 [+0.0, +20.0]" in section  # survival difference in points
    assert "τ=8: slope 0.50, σ 0.250, 2σ/slope 1.000" in section and "10 held-out prompts" in section


def test_every_method_gets_its_best_setting_and_its_own_statement():
    # SR: α=0.5 inside (speedup 2.0). Random SR: both settings inside; α=0.9's speedup (1.2 / 0.8 = 1.5)
    # beats α=0.5's (1.1 / 1.0 = 1.1). first-k: below Bo32, so its best is its highest score.
    control = [sr_row(alpha, score, compute, "interpolated", compute=equivalent) | {
        "method": "sr-random", "method_label": f"Random SR α={alpha:g}"}
        for alpha, score, compute, equivalent in ((0.5, 102.0, 1.0, 1.1), (0.9, 104.0, 0.8, 1.2))]
    other = sr_row(0.5, 90.0, 0.5, "below_range", extrapolated=0.6) | {
        "method": "first-k", "setting": '{"k":2,"n":3}', "method_label": "First 2 of 3", "n": NAN}
    bon_equivalent = pd.concat([pd.DataFrame([other, *control]), two_alpha_frame()], ignore_index=True)
    table = headline_table(summary_frame(), bon_equivalent)
    # per pair: the methods by name, each method's settings in the input's order
    assert table["method_label"].tolist() == ["First 2 of 3", "SR α=0.5", "SR α=0.9", "Random SR α=0.5",
                                              "Random SR α=0.9"]
    assert table["best"].tolist() == [True, True, False, False, True]
    assert table.groupby("method", sort=False)["selection"].first().to_dict() == {
        "first-k": SELECTED_BY_SCORE, "sr": SELECTED_BY_SPEEDUP, "sr-random": SELECTED_BY_SPEEDUP}
    page = render_headline_markdown(table)
    # the page: the table first, then the paper's SR, then the others by strength (Random SR inside
    # the curve at a speedup of 1.5, then first-k, below it)
    paragraphs = page.split(f"## {PAIR}")[1].split("\n\n")
    assert paragraphs[1].startswith("| Setting")
    assert paragraphs[2].startswith("**SR α=0.5** scores 130")
    assert paragraphs[3].startswith("**Random SR α=0.9** scores 104")
    assert "1.5× less compute at equal score" in paragraphs[3]  # 1.2 / 0.8 (no interval in these inputs)
    assert paragraphs[4].startswith("No setting of first-k lands inside the measured Best-of-N curve (Bo32 = 100 "
                                    "to Bo128 = 140). Its highest-scoring: **First 2 of 3** scores 90")
    assert "below Bo32 (100), the cheapest Best-of-N" in paragraphs[4]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    assert rows[0][0] == "Setting" and [row[0] for row in rows[2:]] == [
        "**SR α=0.5** (best)", "SR α=0.9", "Random SR α=0.5", "**Random SR α=0.9** (best)", "**First 2 of 3** (best)"]
    assert "FLOPs" not in page  # no FLOP counts in these inputs: no FLOP column, no FLOP note


def test_the_flop_ratio_stands_beside_the_wall_time_ratio():
    row = sr_row(0.5, 130.0, 1.5, "interpolated", compute=3.0, low=2.5, high=3.5) | {
        "relative_flops": 0.8, "relative_flops_lo": 0.7, "relative_flops_hi": 0.9}
    table = headline_table(summary_frame(), pd.DataFrame([row]))
    assert table[["relative_flops", "relative_flops_lo", "relative_flops_hi"]].values.tolist() == [[0.8, 0.7, 0.9]]
    page = render_headline_markdown(table)
    assert "at 1.5× [1.4, 1.6] Bo32's compute (0.80× [0.70, 0.90] its FLOPs); Best-of-N needs" in page
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    assert rows[0][2:4] == ["compute (× Bo32)", "FLOPs (× Bo32)"] and rows[2][2:4] == ["1.5 [1.4, 1.6]",
                                                                                       "0.80 [0.70, 0.90]"]
    assert "FLOPs: the records' FLOP counts" in page


def test_token_savings_of_a_method_without_an_initial_batch_or_rounds():
    # first-k samples 3 candidates (num_candidates) and records neither init_batch_size nor rounds:
    # p1 1 − 60 / (3 × 50) = 0.6, p2 1 − 15 / (3 × 25) = 0.8 → 0.7.
    runs = runs_frame({(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0})
    other = pd.DataFrame([{"pair": PAIR, "method": "first-k", "n": NAN, "setting": '{"k":2,"n":3}',
                           "method_label": "First 2 of 3", "prompt_id": prompt, "tokens_generated": generated,
                           "num_candidates": 3, "init_batch_size": NAN, "min_tokens": NAN,
                           "first_decision_token": NAN} for prompt, generated in (("p1", 60.0), ("p2", 15.0))])
    savings = token_savings(pd.concat([runs, other], ignore_index=True), correlation_frame(), n_resamples=0)
    assert savings["method_label"].tolist() == ["First 2 of 3", "SR α=0.5"]
    first = savings.iloc[0]
    assert first["tokens_saved_frac"] == pytest.approx(0.7) and first["init_batch_size"] == 3
    assert first["decision_token_source"] == "unknown" and math.isnan(first["oracle_tokens_saved_frac"])
    assert savings.iloc[1]["tokens_saved_frac"] == pytest.approx(0.5)  # SR's, as without first-k
    other_row = sr_row(0.5, 90.0, 0.5, "below_range", extrapolated=0.6) | {
        "method": "first-k", "setting": '{"k":2,"n":3}', "method_label": "First 2 of 3", "n": NAN}
    headline = headline_table(summary_frame(), pd.DataFrame([other_row, *two_alpha_frame().to_dict("records")]))
    page = render_headline_markdown(headline, savings)
    assert "**Tokens (first-k).** first-k's first decision token was not recorded" in page
    assert "first-k saved, of the tokens Best-of-3 would generate" in page and "First 2 of 3 70%" in page
    assert "**Tokens (SR).** SR's first rejection comes at token 10" in page


def test_two_pairs_get_one_section_each_with_their_own_numbers():
    """The grid's page: pair B (another generator) has one α, 120 at 1.0× compute with a
    BoN-equivalent of 3.0× (speedup 3.0 / 1.0 = 3.0); pair A is the two-α pair above."""
    other = "gen2 / rm"
    summary = pd.concat([summary_frame(), summary_frame().assign(pair=other, pair_key="gen2--rm", generator="gen2")],
                        ignore_index=True)
    points = pd.concat([two_alpha_frame(), pd.DataFrame([
        sr_row(0.5, 120.0, 1.0, "interpolated", compute=3.0, low=2.5, high=3.5, speedup_low=2.5,
               speedup_high=3.5)]).assign(pair=other, pair_key="gen2--rm", generator="gen2")], ignore_index=True)
    sr_tokens = {(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0, (0.9, "p2"): 400.0}
    runs = pd.concat([runs_frame(sr_tokens), runs_frame({(0.5, "p1"): 1600.0, (0.5, "p2"): 800.0}).assign(pair=other)],
                     ignore_index=True)
    correlation = pd.concat([correlation_frame(), correlation_frame().assign(pair=other)], ignore_index=True)
    headline = headline_table(summary, points)
    page = render_headline_markdown(headline, token_savings(runs, correlation, n_resamples=200))
    assert page.count("\n## ") == 3  # the two pairs, then the notes
    first, second = page.split(f"## {PAIR}\n")[1].split(f"## {other}\n")
    assert "**SR α=0.5** scores 130 [125, 135]" in first and "SR α=0.9" in first
    assert "**SR α=0.5** scores 120 [115, 125] (eq. 8; Bo32 = 100) at 1.0× [0.90, 1.1]" in second  # 0.9: 2 digits
    assert "3.0× [2.5, 3.5] less compute at equal score" in second and "SR α=0.9" not in second
    # B's tokens: Bo64 to completion is 64 × 50 = 3200 (p1) and 64 × 25 = 1600 (p2); SR generated
    # 1600 and 800: half of each saved
    assert "SR α=0.5 50% [" in second.split("**Tokens (SR).**")[1]


def test_the_page_opens_with_sr_then_the_strongest_method_not_the_first_by_name():
    """Hand-made: "deepconf" (first by name) inside the curve at a speedup of 1.2 / 1.25 = 0.96,
    "pandora" inside at 3.0 / 1.0 = 3.0, "beam" above the curve; SR's best at 2.0."""
    def method(name, label, score, compute, status, equivalent=NAN):
        return sr_row(0.5, score, compute, status, compute=equivalent) | {
            "method": name, "method_label": label, "setting": f'{{"{name}":1}}'}
    others = pd.DataFrame([method("deepconf", "DeepConf N=32", 110.0, 1.25, "interpolated", 1.2),
                           method("pandora", "Pandora N=64", 130.0, 1.0, "interpolated", 3.0),
                           method("beam", "Beam", 150.0, 5.0, "above_range")])
    table = headline_table(summary_frame(), pd.concat([others, two_alpha_frame()], ignore_index=True))
    assert method_order(table) == ["sr", "pandora", "deepconf", "beam"]
    page = render_headline_markdown(table)
    section = page.split(f"## {PAIR}")[1].split("\n\n")
    assert section[1].startswith("| Setting")  # the table before the paragraphs
    assert [paragraph[:paragraph.index("**", 2) + 2] for paragraph in section[2:5]] == [
        "**SR α=0.5**", "**Pandora N=64**", "**DeepConf N=32**"]


@pytest.mark.parametrize("share, shown", [(-0.004, "0%"), (-0.0049, "0%"), (0.004, "0%"), (-0.02, "-2%"), (0.5, "50%")])
def test_a_share_that_rounds_to_zero_reads_0_percent_never_minus_0(share, shown):
    assert percent(share) == shown


def test_a_setting_that_completed_no_response_has_a_row_and_a_sentence_that_say_so():
    table = headline_table(summary_frame(), two_alpha_frame())
    unanswered = pd.DataFrame([{"pair": PAIR, "generator": "gen", "method_label": "DeepConf N=32", "run": "r.jsonl",
                                "error": "no complete response: every trace stopped"}])
    page = render_headline_markdown(table, unanswered=unanswered)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    assert rows[-1][:2] == ["DeepConf N=32", "no complete response on any prompt"]
    assert ("**DeepConf N=32** completed no response on any prompt (no complete response: every trace stopped): it "
            "has no score, and it leaves out no prompt of the other methods.") in page
    assert "DeepConf" not in render_headline_markdown(table)
