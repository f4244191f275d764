"""analysis.headline, analysis.summary_page and analysis.summary_format on hand-worked tables (the
expected numbers are worked out by hand). The headline page (``render_headline_markdown``) is one
short page; the detail page (``render_details_markdown``) keeps every setting's and method's prose."""

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
from analysis.summary_details import render_details_markdown
from analysis.summary_page import method_order, render_headline_markdown

pytestmark = pytest.mark.filterwarnings("error")

PAIR = "gen / rm"
NAN = math.nan
# The BoN ladder: Bo32 (compute 1, score 100), Bo64 (2, 120), Bo128 (4, 140).
BON = [(32, 1.0, 100.0), (64, 2.0, 120.0), (128, 4.0, 140.0)]


def table_rows(page: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``page`` (header and rule rows included)."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]


def tables_of(page: str) -> list[list[list[str]]]:
    """Each Markdown table of ``page`` as its rows of cells (the header first, the rule row dropped)."""
    tables, lines = [], page.splitlines()
    for before, line in zip([""] + lines, lines):
        if line.startswith("|"):
            if not before.startswith("|"):
                tables.append([])
            if not line.startswith("|:"):
                tables[-1].append([cell.strip() for cell in line.strip("|").split("|")])
    return tables


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
    # the headline: the method's highest score, out of range (no display: the method's name); 10 / 2 = 5.0
    assert page.split("\n\n")[1] == (
        "No setting of sr lands inside the measured Best-of-N curve on gen / rm (Bo32 = 100 to Bo128 = 140): its "
        "highest-scoring, **SR α=0.9**, scores 160 [155, 165] at 2.0× [1.9, 2.1] Bo32's compute, above the largest "
        "Best-of-N (Bo128 = 140); extending the curve's last segment (extrapolated, not measured) gives a "
        "speedup of ≈ 5.0× (CPU seconds of the work).")
    (settings,) = tables_of(page)
    assert [row[-1] for row in settings[1:]] == ["below Bo32", "above Bo128: ≈ 5.0 (extrapolated)"]
    details = render_details_markdown(table)
    assert "No setting of sr lands inside the measured Best-of-N curve" in details
    assert "above the largest Best-of-N (Bo128 = 140)" in details
    assert "below Bo32 (100), the cheapest Best-of-N" in details
    assert "≈ Bo320" in details and "extrapolated" in details


def test_below_the_cheapest_best_of_n_nothing_is_extrapolated():
    """A setting scoring below Bo-N_min: "below Bo32", never a Best-of-N below the ladder (a "Bo0")."""
    frame = pd.DataFrame([sr_row(0.5, 90.0, 1.5, "below_range", extrapolated=0.03)])
    table = headline_table(summary_frame(), frame)
    row = table.iloc[0]
    for column in ("bon_equivalent_compute_extrapolated", "equivalent_n_extrapolated", "compute_speedup_extrapolated"):
        assert math.isnan(row[column]), column
    page = render_headline_markdown(table)
    assert page.split("\n\n")[1] == (
        "No setting of sr lands inside the measured Best-of-N curve on gen / rm (Bo32 = 100 to Bo128 = 140): its "
        "highest-scoring, **SR α=0.5**, scores 90.0 [85.0, 95.0] at 1.5× [1.4, 1.6] Bo32's compute, below Bo32 (100), "
        "the cheapest Best-of-N.")
    (settings,) = tables_of(page)
    assert dict(zip(settings[0], settings[1], strict=True))["speedup at equal score"] == "below Bo32"
    assert '"below Bo32": it scores below the cheapest Best-of-N, so there is none to compare with.' in page
    details = render_details_markdown(table)
    statement = details.split(f"## {PAIR}")[1].split("\n\n")[2]  # after the table
    assert statement == ("No setting of sr lands inside the measured Best-of-N curve (Bo32 = 100 to Bo128 = 140). "
                         "Its highest-scoring: **SR α=0.5** scores 90.0 [85.0, 95.0] (eq. 8; Bo32 = 100) at 1.5× [1.4, 1.6] "
                         "Bo32's compute, below Bo32 (100), the cheapest Best-of-N.")
    rows = table_rows(details)
    header, cells = rows[0], dict(zip(rows[0], rows[2], strict=True))
    assert cells["≈ Best-of-N"] == "below Bo32" and cells["where"] == "below Bo32"
    assert cells["speedup at equal score"] == "--" and cells["BoN-equivalent compute (× Bo32)"] == "--", header
    assert "Out of range: SR α=0.5 scores below Bo32 (100), the cheapest Best-of-N; no Best-of-N is cheaper" in details
    for nonsense in ("Bo0", "Bo1 ", "0.03", "Extending the end segment", "extrapolated"):
        assert nonsense not in page and (nonsense == "extrapolated" or nonsense not in details), nonsense


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
    page = render_headline_markdown(headline_table(summary_frame(), two_alpha_frame()), savings)
    assert tables_of(page)[1][1] == ["SR α=0.5", "8 (min_tokens)", "75% of Bo64", "82% [77%, 87%]"]
    assert "\"(min_tokens)\": rounds not recorded, the setting's min_tokens stands in" in page
    # τ = 12 was not studied: the nearest (8 and 16 tie; the smaller) stands in, flagged.
    runs = runs_frame({(0.5, "p1"): 800.0}, first_decision=12.0)
    savings = token_savings(runs, correlation_frame((8, 16, 32)), n_resamples=0)
    assert savings["oracle_tau"].tolist() == [8.0] and not savings["oracle_tau_exact"].any()
    assert savings["correlation_taus"].tolist() == ["8, 16, 32"]
    headline = headline_table(summary_frame(), two_alpha_frame())
    page = render_headline_markdown(headline, savings)
    # the tokens table: the first cut at 12, the oracle at the nearest τ (8: 0.82 ± 0.05), named in the cell
    tokens = tables_of(page)[1]
    assert tokens[1] == ["SR α=0.5", "12", "75% of Bo64", "82% [77%, 87%] (τ = 8)"]  # 1 − 800 / (64 × 50)
    assert "(it scored τ = 8, 16, 32 only: a first cut at another token reads the nearest, named in the cell)" in page
    assert "did not score τ = 12 (its τ: 8, 16, 32)" in render_details_markdown(headline, savings)


def test_the_headline_says_when_the_speedups_interval_holds_1():
    frame = two_alpha_frame()
    frame.loc[0, "compute_speedup_lo"] = 0.8  # α=0.5: 2.0× [0.8, 2.5]
    page = render_headline_markdown(headline_table(summary_frame(), frame))
    assert page.split("\n\n")[1].startswith(
        "**SR α=0.5**, the best setting of sr on gen / rm, matches Best-of-N's score with **2.0× [0.80, 2.5] less "
        "compute** (the speedup at equal score, in CPU seconds of the work: its interval holds 1, so no gain is "
        "shown): it scores 130 [125, 135]")


def test_markdown_states_the_numbers_and_the_out_of_range_point():
    headline = headline_table(summary_frame(), two_alpha_frame())
    runs = runs_frame({(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0, (0.9, "p2"): 400.0})
    savings = token_savings(runs, correlation_frame(), n_resamples=200)
    page = render_headline_markdown(headline, savings, correlation_resamples=2000)
    assert page.startswith("# ") and f"## {PAIR}" not in page  # one pair: no section of its own
    # the headline: α=0.5's speedup 3.0 / 1.5 = 2.0 with its interval, its score and compute, ≈ 3.0 × 32 = Bo96
    assert page.split("\n\n")[1] == (
        "**SR α=0.5**, the best setting of sr on gen / rm, matches Best-of-N's score with **2.0× [1.5, 2.5] less "
        "compute** (the speedup at equal score, in CPU seconds of the work): it scores 130 [125, 135] at 1.5× [1.4, "
        "1.6] Bo32's compute, where Best-of-N needs ≈ 3.0× [2.5, 3.5] (≈ Bo96).")
    settings, tokens = tables_of(page)
    assert settings == [["Setting", "score", "compute (× Bo32)", "speedup at equal score"],
                        ["**SR α=0.5** (best)", "130 [125, 135]", "1.5 [1.4, 1.6]", "2.0 [1.5, 2.5]"],
                        ["SR α=0.9", "160 [155, 165]", "2.0 [1.9, 2.1]", "above Bo128: ≈ 5.0 (extrapolated)"]]
    # tokens: 50% and 81% (0.8125) of Bo64's, the oracle 80% [75%, 85%] at the first cut, token 10
    assert [row[:2] for row in tokens] == [["Setting", "first cut at token"], ["SR α=0.5", "10"], ["SR α=0.9", "10"]]
    assert tokens[1][2].startswith("50% [") and tokens[1][2].endswith("] of Bo64")
    assert tokens[2][2].startswith("81% [") and tokens[1][3] == tokens[2][3] == "80% [75%, 85%]"
    notes = page.split("\n\n")[-1]
    assert "eq. 8 on 19 of the 20 prompts answered by every configuration" in notes and "p7" in notes
    assert "95% percentile intervals" in notes and "1000 resamples" in notes and "2000 resamples" in notes
    assert "mean response length from Bo128's candidates, 2 prompts" in notes
    assert "the oracle on the correlation study's 12 prompts" in notes
    page = render_details_markdown(headline, savings, correlation_resamples=2000)
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
    headline = headline_table(summary_frame(), frame)
    page = render_headline_markdown(headline)
    assert page.split("\n\n")[1].startswith("**SR α=0.5**, the best setting of sr on gen / rm, has a speedup at "
                                             "equal score of only **0.50× [0.40, 0.60]** (in CPU seconds of the work): "
                                             "Best-of-N reaches its score with less compute.")
    assert "zero-spread" not in page
    page = render_details_markdown(headline)
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
    bound = headline_table(summary_frame(), pd.DataFrame([{
        **row, "compute_speedup_hi_is_bound": True, "compute_speedup_lo_is_bound": False}]))
    page = render_headline_markdown(bound)
    assert "**2.0× [1.7, ≥ 2.7] less compute**" in page and "≈ 3.0× [2.5, ≥ 4.0]" in page
    assert tables_of(page)[0][1][-1] == "2.0 [1.7, ≥ 2.7]"
    assert "A limit marked ≥ (≤) is a bound" in page and "censored at the curve's end" in page
    details = render_details_markdown(bound)
    assert "2.0× [1.7, ≥ 2.7]" in details and "Bo96 [80, ≥ 128]" in details
    assert "censored at the curve's end" in details
    plain = render_headline_markdown(headline_table(summary_frame(), pd.DataFrame([row])))
    assert "2.0× [1.7, 2.7]" in plain and "≥" not in plain.split("\n- ")[0]


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
    assert page.split("\n\n")[1].startswith("**SR α=0.5**, the best setting of sr")  # the headline: the fixed α
    assert "\n## Notes\n" in page  # after the section, the notes under their own heading
    section = page[page.index("### Adaptive rejection"):]
    assert "**SR δ=0.05**: 135 [130, 140] at 1.2× [1.1, 1.3] compute; speedup at equal score 3.2× [2.0, 3.5]" in section
    assert "(best fixed α, SR α=0.5: 130 [125, 135] at 1.5× [1.4, 1.6], 2.0× [1.5, 2.5])" in section
    assert "cheaper than every fixed α" in section and "it dominates SR α=0.5" in section
    assert "50% (25%–75%)" in section and " 0.50 |" in section  # rows kept by the rule; the equal α
    assert "+10.0 [+0.0, +20.0]" in section  # survival difference in points
    assert "τ=8: slope 0.50, σ 0.250, 2σ/slope 1.000" in section and "10 held-out prompts" in section
    # beside a second pair without adaptive runs (listed last): the section stays in its own pair's
    other = "gen2 / rm"
    summary = pd.concat([summary_frame(), summary_frame().assign(pair=other, pair_key="gen2--rm")], ignore_index=True)
    two = headline_table(summary, pd.concat([bon_equivalent, two_alpha_frame().assign(pair=other, pair_key="gen2--rm")],
                                            ignore_index=True))
    page = render_headline_markdown(two, adaptive=against, survival=survival, fits=fits)
    first, second = page.split(f"## {PAIR}\n")[1].split(f"## {other}\n")
    assert first.count("### Adaptive rejection") == 1 and "Adaptive rejection" not in second


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
    # the page: the headline (the paper's SR), then one table, the paper's SR first, then the others by
    # strength (Random SR inside the curve at a speedup of 1.5, then first-k, below it)
    assert page.split("\n\n")[1].startswith("**SR α=0.5**, the best setting of sr on gen / rm")
    (settings,) = tables_of(page)
    assert [row[0] for row in settings[1:]] == ["**SR α=0.5** (best)", "SR α=0.9", "Random SR α=0.5",
                                                "**Random SR α=0.9** (best)", "**First 2 of 3** (best)"]
    assert settings[4][-1] == "1.5" and settings[5][-1] == "below Bo32"
    assert "FLOPs" not in page
    # the detail page: a statement per method, in the same order
    page = render_details_markdown(table)
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
    (settings,) = tables_of(page)
    assert settings[0][2:4] == ["compute (× Bo32)", "FLOPs (× Bo32)"]
    assert settings[1][2:4] == ["1.5 [1.4, 1.6]", "0.80 [0.70, 0.90]"]
    assert "FLOPs: the records' FLOP counts from the models' shapes" in page
    details = render_details_markdown(table)
    assert "at 1.5× [1.4, 1.6] Bo32's compute (0.80× [0.70, 0.90] its FLOPs); Best-of-N needs" in details
    rows = table_rows(details)
    assert rows[0][2:4] == ["compute (× Bo32)", "FLOPs (× Bo32)"] and rows[2][2:4] == ["1.5 [1.4, 1.6]",
                                                                                       "0.80 [0.70, 0.90]"]
    assert "FLOPs: the records' FLOP counts" in details


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
    tokens = tables_of(render_headline_markdown(headline, savings))[1]
    # SR first (the paper's method), then first-k: no decision token, so no oracle; 70% of Best-of-3's tokens
    assert tokens[1:] == [["SR α=0.5", "10", "50% of Bo64", "80% [75%, 85%]"],
                          ["First 2 of 3", "--", "70% of Bo3", "--"]]
    page = render_details_markdown(headline, savings)
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
               speedup_high=3.5)]).assign(pair=other, pair_key="gen2--rm", generator="gen2", n_prompts_improvement=18,
                                          zero_spread_prompts="p7,p9")], ignore_index=True)
    sr_tokens = {(0.5, "p1"): 800.0, (0.5, "p2"): 1200.0, (0.9, "p1"): 400.0, (0.9, "p2"): 400.0}
    runs = pd.concat([runs_frame(sr_tokens), runs_frame({(0.5, "p1"): 1600.0, (0.5, "p2"): 800.0}).assign(pair=other)],
                     ignore_index=True)
    correlation = pd.concat([correlation_frame(), correlation_frame().assign(pair=other)], ignore_index=True)
    headline = headline_table(summary, points)
    savings = token_savings(runs, correlation, n_resamples=200)
    page = render_headline_markdown(headline, savings, summary=summary)
    assert page.count("\n## ") == 3  # the two pairs, then the notes
    top, rest = page.split(f"## {PAIR}\n")
    first, second = rest.split(f"## {other}\n")
    # the headline first: a sentence per pair (B: 3.0 / 1.0 = 3.0, ≈ 3.0 × 32 = Bo96)
    assert top.split("\n\n")[1].splitlines() == [
        "- **SR α=0.5**, the best setting of sr on gen / rm, matches Best-of-N's score with **2.0× [1.5, 2.5] less "
        "compute** (the speedup at equal score, in CPU seconds of the work): it scores 130 [125, 135] at 1.5× [1.4, "
        "1.6] Bo32's compute, where Best-of-N needs ≈ 3.0× [2.5, 3.5] (≈ Bo96).",
        "- **SR α=0.5**, the best setting of sr on gen2 / rm, matches Best-of-N's score with **3.0× [2.5, 3.5] less "
        "compute** (the speedup at equal score, in CPU seconds of the work): it scores 120 [115, 125] at 1.0× [0.90, "
        "1.1] Bo32's compute, where Best-of-N needs ≈ 3.0× [2.5, 3.5] (≈ Bo96)."]  # 0.9: 2 digits
    # one table per pair, the ladder first (Bo32 1, Bo64 2, Bo128 4: no intervals in these inputs)
    settings, tokens = tables_of(first)
    assert [row[0] for row in settings[1:]] == ["Bo32", "Bo64", "Bo128", "**SR α=0.5** (best)", "SR α=0.9"]
    assert settings[2] == ["Bo64", "120", "2.0", "reference"]
    settings, tokens = tables_of(second)
    assert [row[0] for row in settings[1:]] == ["Bo32", "Bo64", "Bo128", "**SR α=0.5** (best)"]
    assert settings[4][1:] == ["120 [115, 125]", "1.0 [0.90, 1.1]", "3.0 [2.5, 3.5]"] and "SR α=0.9" not in second
    # B's tokens: Bo64 to completion is 64 × 50 = 3200 (p1) and 64 × 25 = 1600 (p2); SR generated
    # 1600 and 800: half of each saved
    assert tokens[1][0] == "SR α=0.5" and tokens[1][2].startswith("50% [") and tokens[1][2].endswith("] of Bo64")
    # a pair's own facts under its tables (B: two zero-spread prompts); what both share and the
    # definitions once, in the notes (both pairs' tokens: Bo128's lengths, 2 prompts, the oracle on 12)
    assert first.endswith("- Prompts: eq. 8 on 19 of the 20 prompts answered by every configuration; left out as "
                          "zero-spread (Bo32's rewards all equal): p7.\n\n")
    assert ("- Prompts: eq. 8 on 18 of the 20 prompts answered by every configuration; left out as zero-spread "
            "(Bo32's rewards all equal): p7, p9.") in second
    notes = second.split("## Notes\n")[1]
    assert ("(mean response length from Bo128's candidates, 2 prompts; the oracle on the correlation study's 12 "
            "prompts).") in notes and page.count("mean response length") == 1 and "- Tokens:" not in first
    assert page.count("Score: the paper's eq. 8 improvement") == 1 and page.count("Brackets:") == 1
    details = render_details_markdown(headline, savings)
    first, second = details.split(f"## {PAIR}\n")[1].split(f"## {other}\n")
    assert "**SR α=0.5** scores 130 [125, 135]" in first and "SR α=0.9" in first
    assert "**SR α=0.5** scores 120 [115, 125] (eq. 8; Bo32 = 100) at 1.0× [0.90, 1.1]" in second
    assert "3.0× [2.5, 3.5] less compute at equal score" in second and "SR α=0.9" not in second
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
    assert page.split("\n\n")[1].startswith("**SR α=0.5**, the best setting of sr")
    assert [row[0] for row in tables_of(page)[0][1:]] == [
        "**SR α=0.5** (best)", "SR α=0.9", "**Pandora N=64** (best)", "**DeepConf N=32** (best)", "**Beam** (best)"]
    section = render_details_markdown(table).split(f"## {PAIR}")[1].split("\n\n")
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
    rows = table_rows(page)
    assert rows[-1] == ["DeepConf N=32", "no complete response on any prompt", "--", "--"]
    assert ("- No response on any prompt: DeepConf N=32 (no complete response: every trace stopped). It has no "
            "score and leaves out no prompt of the other methods.") in page
    assert "DeepConf" not in render_headline_markdown(table)
    details = render_details_markdown(table, unanswered=unanswered)
    assert table_rows(details)[-1][:2] == ["DeepConf N=32", "no complete response on any prompt"]
    assert ("**DeepConf N=32** completed no response on any prompt (no complete response: every trace stopped): it "
            "has no score, and it leaves out no prompt of the other methods.") in details


# --------------------------------------------------------------------------------------
# a realistic study: one pair, the Best-of-N ladder Bo16-Bo128 and eight settings of five methods
# --------------------------------------------------------------------------------------

STUDY_BON = [(16, 100.0, 1.0), (32, 106.0, 2.0), (64, 111.0, 4.0), (128, 115.0, 8.0)]  # (N, score, compute)
STUDY_NAMES = {"sr": "SR", "sr-random": "Random SR", "st-bon": "ST-BoN", "deepconf": "DeepConf",
               "pandora": "Pandora BoN"}


def study_summary() -> pd.DataFrame:
    """The ladder as analysis.metrics.method_summary writes it: Bo16's score and compute are 100
    and 1 in every resample (their intervals are only themselves); the others ±3 and ±10%."""
    rows = []
    for n, score, compute in STUDY_BON:
        spread = 0.0 if n == 16 else 3.0
        rows.append({"pair_key": "gen--rm", "pair": PAIR, "generator": "gen", "reward": "rm", "method": "bon", "n": n,
                     "setting": f'{{"n":{n}}}', "method_label": f"Bo{n}", "method_name": "Best-of-N",
                     "reference": True, "improvement": score, "improvement_lo": score - spread,
                     "improvement_hi": score + spread, "relative_compute": compute,
                     "relative_compute_lo": compute * (1 - spread / 30),
                     "relative_compute_hi": compute * (1 + spread / 30),
                     "relative_flops": compute, "relative_flops_lo": compute, "relative_flops_hi": compute,
                     "n_prompts": 20, "n_prompts_improvement": 19, "zero_spread_prompts": "p7",
                     "confidence_level": 0.95, "bootstrap_resamples": 1000})
    return pd.DataFrame(rows)


def study_setting(method, label, score, compute, status, equivalent=NAN, speedup=(NAN, NAN), extrapolated=NAN,
                  flops=NAN, flops_speedup=(NAN, NAN, NAN), in_range=1.0, hi_is_bound=False) -> dict:
    """One setting on the ladder (analysis.bon_curve's columns); speedup = equivalent / compute."""
    return sr_row(0.5, score, compute, status, compute=equivalent, low=equivalent * 0.8, high=equivalent * 1.2,
                  extrapolated=extrapolated, speedup_low=speedup[0], speedup_high=speedup[1], in_range=in_range) | {
        "method": method, "method_name": STUDY_NAMES[method], "method_label": label,
        "setting": f'{{"label":"{label}"}}', "relative_flops": flops, "relative_flops_lo": flops - 0.1,
        "relative_flops_hi": flops + 0.1, "flops_speedup": flops_speedup[0], "flops_speedup_lo": flops_speedup[1],
        "flops_speedup_hi": flops_speedup[2], "compute_speedup_hi_is_bound": hi_is_bound,
        "compute_speedup_lo_is_bound": False}


def study_settings() -> pd.DataFrame:
    """SR α=0.7 is SR's best: 6.5 / 1.3 = 5.0× (α=0.5: 5.6 / 1.4 = 4.0×; α=0.9 scores 116, above
    Bo128's 115, extrapolated 10 / 1.8 ≈ 5.6×). Pandora 3.6 / 3.0 = 1.2×, DeepConf 2.75 / 2.5 =
    1.1×, Random SR α=0.5 1.5 / 1.5 = 1.0× (α=0.9 below Bo16), ST-BoN below Bo16."""
    return pd.DataFrame([
        study_setting("sr", "SR α=0.5", 113.0, 1.4, "interpolated", 5.6, (3.0, 5.0), flops=2.6,
                      flops_speedup=(2.4, 1.2, 3.1)),
        study_setting("sr", "SR α=0.7", 114.0, 1.3, "interpolated", 6.5, (2.1, 5.9), flops=2.3,
                      flops_speedup=(3.4, 1.2, 3.6), in_range=0.8, hi_is_bound=True),
        study_setting("sr", "SR α=0.9", 116.0, 1.8, "above_range", extrapolated=10.0, flops=3.0, in_range=0.0),
        study_setting("sr-random", "Random SR α=0.5", 103.0, 1.5, "interpolated", 1.5, (0.5, 1.6), flops=2.6),
        study_setting("sr-random", "Random SR α=0.9", 98.0, 1.0, "below_range", flops=2.0, in_range=0.0),
        study_setting("st-bon", "ST-BoN N=32", 90.0, 0.9, "below_range", flops=1.1, in_range=0.0),
        study_setting("deepconf", "DeepConf N=32", 108.0, 2.5, "interpolated", 2.75, flops=2.0),
        study_setting("pandora", "Pandora BoN N=64", 110.0, 3.0, "interpolated", 3.6, flops=3.5),
    ])


def study_savings() -> pd.DataFrame:
    """analysis.headline.token_savings' columns by hand: SR and its control cut first at token 8
    (the oracle there saves 64% [55%, 71%]), ST-BoN at token 16 (12-20 over the prompts; 58%),
    DeepConf and Pandora record no decision token (no oracle)."""
    def row(method, label, b_init, saved, token=NAN, low=NAN, high=NAN, oracle=(NAN, NAN, NAN)) -> dict:
        return {"pair": PAIR, "method": method, "setting": f'{{"label":"{label}"}}', "method_label": label,
                "method_name": STUDY_NAMES[method], "init_batch_size": b_init,
                "min_tokens": 8.0 if method.startswith("sr") else NAN, "first_decision_token": token,
                "first_decision_token_min": low, "first_decision_token_max": high,
                "decision_token_source": "rounds" if np.isfinite(token) else "unknown", "reference_bon_n": 128,
                "n_prompts": 24, "tokens_saved_frac": saved, "tokens_saved_frac_lo": saved - 0.04,
                "tokens_saved_frac_hi": saved + 0.04, "oracle_tau": token, "oracle_tau_exact": np.isfinite(token),
                "correlation_taus": "8, 16, 32, 48", "oracle_tokens_saved_frac": oracle[0],
                "oracle_tokens_saved_frac_lo": oracle[1], "oracle_tokens_saved_frac_hi": oracle[2],
                "oracle_n_prompts": 24 if np.isfinite(token) else NAN, "confidence_level": 0.95,
                "bootstrap_resamples": 1000}

    at_8, at_16 = (0.64, 0.55, 0.71), (0.58, 0.50, 0.65)
    return pd.DataFrame([
        row("sr", "SR α=0.5", 128, 0.66, 8, 8, 8, at_8), row("sr", "SR α=0.7", 128, 0.72, 8, 8, 8, at_8),
        row("sr", "SR α=0.9", 128, 0.78, 8, 8, 8, at_8),
        row("sr-random", "Random SR α=0.5", 128, 0.66, 8, 8, 8, at_8),
        row("sr-random", "Random SR α=0.9", 128, 0.78, 8, 8, 8, at_8),
        row("st-bon", "ST-BoN N=32", 32, 0.55, 16, 12, 20, at_16),
        row("deepconf", "DeepConf N=32", 32, 0.30), row("pandora", "Pandora BoN N=64", 64, 0.45),
    ])


def study_page(**kwargs) -> str:
    return render_headline_markdown(headline_table(study_summary(), study_settings()), study_savings(),
                                    correlation_resamples=2000, summary=study_summary(),
                                    details=["tables/headline.md", "metrics/headline.csv"], **kwargs)


def test_the_study_headline_is_one_short_page():
    """Twelve settings (the Best-of-N ladder of four, eight of five methods) on one page of at most
    35 lines: the headline sentence, one table of every setting, one small table of tokens, the notes once."""
    page = study_page()
    lines = page.splitlines()
    assert len(lines) <= 35, len(lines)
    assert lines[0].startswith("# ") and not any(line.startswith("## ") for line in lines)  # one pair, one page
    # the headline first: SR's best is α=0.7 (6.5 / 1.3 = 5.0 beats α=0.5's 5.6 / 1.4 = 4.0), its upper limit a bound;
    # it needs 6.5 ± 20% of Bo16's compute from Best-of-N, ≈ 6.5 × 16 = Bo104
    assert lines[2] == (
        "**SR α=0.7**, the best setting of SR on gen / rm, matches Best-of-N's score with **5.0× [2.1, ≥ 5.9] less "
        "compute** (the speedup at equal score, in CPU seconds of the work; 3.4× [1.2, 3.6] in FLOPs): it scores "
        "114 [109, 119] at 1.3× [1.2, 1.4] Bo16's compute, where Best-of-N needs ≈ 6.5× [5.2, ≥ 7.8] (≈ Bo104).")
    settings, tokens = tables_of(page)  # exactly two tables: the settings, the tokens
    assert settings[0] == ["Setting", "score", "compute (× Bo16)", "FLOPs (× Bo16)", "speedup at equal score"]
    # the ladder (Bo16's score and compute are themselves in every resample: no brackets), then SR, then the
    # others by strength inside the curve (Pandora 1.2, DeepConf 1.1, Random SR 1.0), then ST-BoN, below it
    assert settings[1:] == [
        ["Bo16", "100", "1.0", "1.0", "reference"],
        ["Bo32", "106 [103, 109]", "2.0 [1.8, 2.2]", "2.0", "reference"],
        ["Bo64", "111 [108, 114]", "4.0 [3.6, 4.4]", "4.0", "reference"],
        ["Bo128", "115 [112, 118]", "8.0 [7.2, 8.8]", "8.0", "reference"],
        ["SR α=0.5", "113 [108, 118]", "1.4 [1.3, 1.5]", "2.6 [2.5, 2.7]", "4.0 [3.0, 5.0]"],
        ["**SR α=0.7** (best)", "114 [109, 119]", "1.3 [1.2, 1.4]", "2.3 [2.2, 2.4]", "5.0 [2.1, ≥ 5.9]"],
        ["SR α=0.9", "116 [111, 121]", "1.8 [1.7, 1.9]", "3.0 [2.9, 3.1]", "above Bo128: ≈ 5.6 (extrapolated)"],
        ["**Pandora BoN N=64** (best)", "110 [105, 115]", "3.0 [2.9, 3.1]", "3.5 [3.4, 3.6]", "1.2"],
        ["**DeepConf N=32** (best)", "108 [103, 113]", "2.5 [2.4, 2.6]", "2.0 [1.9, 2.1]", "1.1"],
        ["**Random SR α=0.5** (best)", "103 [98.0, 108]", "1.5 [1.4, 1.6]", "2.6 [2.5, 2.7]", "1.0 [0.50, 1.6]"],
        ["Random SR α=0.9", "98.0 [93.0, 103]", "1.0 [0.90, 1.1]", "2.0 [1.9, 2.1]", "below Bo16"],
        ["**ST-BoN N=32** (best)", "90.0 [85.0, 95.0]", "0.90 [0.80, 1.0]", "1.1 [1.0, 1.2]", "below Bo16"]]
    # one row per setting, in the same order: the first cut, the share of Best-of-b_init's tokens, the oracle's
    assert tokens == [
        ["Setting", "first cut at token", "tokens saved", "oracle at that token"],
        ["SR α=0.5", "8", "66% [62%, 70%] of Bo128", "64% [55%, 71%]"],
        ["SR α=0.7", "8", "72% [68%, 76%] of Bo128", "64% [55%, 71%]"],
        ["SR α=0.9", "8", "78% [74%, 82%] of Bo128", "64% [55%, 71%]"],
        ["Pandora BoN N=64", "--", "45% [41%, 49%] of Bo64", "--"],
        ["DeepConf N=32", "--", "30% [26%, 34%] of Bo32", "--"],
        ["Random SR α=0.5", "8", "66% [62%, 70%] of Bo128", "64% [55%, 71%]"],
        ["Random SR α=0.9", "8", "78% [74%, 82%] of Bo128", "64% [55%, 71%]"],
        ["ST-BoN N=32", "16 (12–20)", "55% [51%, 59%] of Bo32", "58% [50%, 65%]"]]
    # the notes, each once for every setting, no paragraph per method or setting
    notes = [line for line in lines if line.startswith("- ")]
    assert [note.split(":")[0] for note in notes] == ["- Score", "- Compute", "- Brackets", "- Tokens",
                                                      "- Every setting in full — its Best-of-N equivalent (≈ Bo-N), "
                                                      "the share of resamples inside the curve, the FLOPs speedup, "
                                                      "each method's best in words, b_init and min_tokens"]
    for once in ('"above Bo128: ≈ x (extrapolated)"', '"below Bo16"', "A limit marked ≥ (≤) is a bound",
                 "eq. 8 on 19 of the 20 prompts", "mean response length from Bo128's candidates, 24 prompts",
                 "2000 resamples", "CPU seconds of the work (device seconds on CUDA", "tables/headline.md"):
        assert page.count(once) == 1, once
    for per_setting in ("Tokens (", "Out of range", "falls outside the Best-of-N curve", "scores higher but outside"):
        assert per_setting not in page, per_setting
    assert len([line for line in lines if line and not line.startswith(("|", "- ", "# "))]) == 1  # one paragraph


def test_the_compute_measure_is_named_as_the_caller_or_the_frame_says():
    wall = study_page(compute="wall")
    assert "less compute** (the speedup at equal score, in wall-clock seconds;" in wall
    assert "Compute: wall-clock seconds of the runs" in wall and "CPU seconds" not in wall
    # a measure the frame names
    headline = headline_table(study_summary(), study_settings()).assign(compute_measure="modelled")
    modelled = render_headline_markdown(headline)
    assert "in modelled seconds; 3.4× [1.2, 3.6] in FLOPs)" in modelled
    assert "Compute: seconds modelled from each record's recorded steps" in modelled
    assert "Compute: seconds modelled from each record's recorded steps" in render_details_markdown(headline)
    assert "in wall-clock seconds" in render_headline_markdown(headline, compute="wall")  # the caller's first
    # one unknown to the page: read as given
    energy = render_headline_markdown(headline, compute="energy")
    assert "in energy compute; 3.4× [1.2, 3.6] in FLOPs)" in energy
    assert "Compute: the 'energy' compute measure, summed over shards and prompts" in energy


def test_every_detail_the_page_leaves_out_is_on_the_detail_page():
    headline, savings = headline_table(study_summary(), study_settings()), study_savings()
    page, details = study_page(), render_details_markdown(headline, savings, correlation_resamples=2000)
    rows = {row[0]: dict(zip(table_rows(details)[0], row, strict=True)) for row in table_rows(details)[2:]}
    best = rows["**SR α=0.7** (best)"]
    # ≈ Bo-N: 6.5 × 16 = 104, [5.2, 7.8] × 16 = [83, ≥ 125]; 80% of the resamples inside the curve
    assert best["≈ Best-of-N"] == "Bo104 [83, ≥ 125]" and best["in range (resamples)"] == "80%"
    assert best["FLOPs speedup"] == "3.4 [1.2, 3.6]" and best["BoN-equivalent compute (× Bo16)"] == "6.5 [5.2, ≥ 7.8]"
    assert rows["SR α=0.9"]["≈ Best-of-N"] == "(extrapolated) Bo160"  # 10 × 16
    assert {"≈ Best-of-N", "in range (resamples)", "FLOPs speedup", "where"} <= set(table_rows(details)[0])
    assert not {"≈ Best-of-N", "in range (resamples)", "FLOPs speedup", "where"} & set(tables_of(page)[0][0])
    for detail in ("≈ Best-of-N", "in range (resamples)", "b_init = 128, min_tokens = 8",
                   "**Pandora BoN N=64** scores 110",
                   "SR α=0.7 falls outside the Best-of-N curve in 20% of the resamples",
                   "Measured compute (× Bo16): Bo16 1.0 (N ratio 1.0), Bo32 2.0 (N ratio 2.0)"):
        assert detail in details and detail not in page, detail


def test_the_page_names_no_method_of_its_own():
    """Methods renamed to ones the project does not know: the page's names are the frame's, and the
    headline speaks of the strongest method (none is the paper's SR)."""
    names = {"sr": ("m-one", "One"), "sr-random": ("m-two", "Two"), "st-bon": ("m-three", "Three"),
             "deepconf": ("m-four", "Four"), "pandora": ("m-five", "Five")}

    def renamed(frame):
        frame = frame.copy()
        frame["method_label"] = [label.replace(STUDY_NAMES[method], names[method][1]) for method, label in
                                 zip(frame["method"], frame["method_label"], strict=True)]
        frame["method_name"] = [names[method][1] for method in frame["method"]]
        frame["method"] = [names[method][0] for method in frame["method"]]
        return frame

    headline = headline_table(study_summary(), renamed(study_settings()))
    page = render_headline_markdown(headline, renamed(study_savings()), summary=study_summary(), title="Headline")
    # the strongest: One α=0.7 at 5.0 (Five 1.2, Four 1.1, Two 1.0)
    assert page.split("\n\n")[1].startswith("**One α=0.7**, the best setting of One on gen / rm, matches")
    assert [row[0] for row in tables_of(page)[0][5:]] == [
        "One α=0.5", "**One α=0.7** (best)", "One α=0.9", "**Five N=64** (best)", "**Four N=32** (best)",
        "**Two α=0.5** (best)", "Two α=0.9", "**Three N=32** (best)"]
    for built_in in ("SR", "ST-BoN", "DeepConf", "Pandora", "sr", "deepconf"):
        assert built_in not in page, built_in
