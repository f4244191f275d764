"""analysis.adaptive_study: hand-worked examples."""

import math
from statistics import NormalDist

import pandas as pd
import pytest

from analysis.adaptive_study import against_fixed_alpha, fits_table, sr_param, survival_at_equal_tokens
from specrej.methods.adaptive_cut import PartialFit

# slope 1, sigma 0.5 and z = 1 (correction "none"): the rule keeps rows within 2 z sigma / slope
# = 1.0 of the best partial score.
FIT = {8: PartialFit(tau=8, slope=1.0, intercept=0.0, sigma=0.5, n=100, prompts=10)}
Z_ONE = 1 - NormalDist().cdf(1.0)


def prefix_table(prompts: dict) -> pd.DataFrame:
    rows = [{"prompt_id": prompt, "tau": 8, "partial_score": p, "final_score": f}
            for prompt, (partials, finals) in prompts.items() for p, f in zip(partials, finals)]
    return pd.DataFrame(rows)


def test_survival_against_fixed_alpha_at_equal_rows_by_hand():
    prefixes = prefix_table({
        # cut at 3.0 - 1.0 = 2.0 keeps rows 0, 1 (share 0.5); the best final (row 2, partial 1.0) is halted
        "a": ([3.0, 2.5, 1.0, 0.0], [1, 0, 5, 2]),
        # cut at 1.0 - 1.0 = 0.0 keeps rows 0, 1, 2 (share 0.75); the best final (row 1) is kept
        "b": ([1.0, 0.8, 0.2, -5.0], [0, 3, 1, 2]),
    })
    (row,) = survival_at_equal_tokens(prefixes, FIT, [Z_ONE], correction="none", n_resamples=0).to_dict("records")
    assert row["adaptive_kept_frac"] == pytest.approx(0.625)
    assert (row["adaptive_kept_frac_min"], row["adaptive_kept_frac_max"]) == (0.5, 0.75)
    # equal tokens: alpha = 1 - 0.625 keeps ceil(0.625 * 4) = 3 rows of each prompt
    assert row["equal_alpha"] == pytest.approx(0.375)
    assert row["fixed_kept_frac"] == pytest.approx(0.75)
    assert row["adaptive_best_survives"] == 0.5
    assert row["fixed_best_survives"] == 1.0  # row 2 of "a" is third by partial score
    assert row["survives_difference"] == -0.5
    assert (row["n_prompts"], row["rows"], row["fit_source"]) == (2, 4.0, "fit")
    assert math.isnan(row["survives_difference_lo"])


def test_survival_intervals_are_paired_and_bracket_the_point():
    prefixes = prefix_table({
        "a": ([3.0, 2.5, 1.0, 0.0], [1, 0, 5, 2]),
        "b": ([1.0, 0.8, 0.2, -5.0], [0, 3, 1, 2]),
    })
    row = survival_at_equal_tokens(prefixes, FIT, [Z_ONE], correction="none", n_resamples=200).iloc[0]
    # resampling prompts a and b: the difference is -1 on a and 0 on b, so every resample lies in [-1, 0]
    assert -1.0 <= row["survives_difference_lo"] <= -0.5 <= row["survives_difference_hi"] <= 0.0


def test_delta_zero_keeps_every_row_and_matches_best_of_n():
    prefixes = prefix_table({"a": ([3.0, 2.5, 1.0, 0.0], [1, 0, 5, 2])})
    row = survival_at_equal_tokens(prefixes, FIT, [0.0], n_resamples=0).iloc[0]
    assert (row["adaptive_kept_frac"], row["equal_alpha"], row["adaptive_best_survives"]) == (1.0, 0.0, 1.0)


def test_fits_table_margin():
    table = fits_table({16: PartialFit(16, 2.0, 0.1, 0.5, 40), 8: PartialFit(8, 0.0, 0.1, 0.5, 40)})
    assert list(table["tau"]) == [8, 16]
    assert math.isnan(table["margin_per_z"][0])  # a flat slope ranks nothing
    assert table["margin_per_z"][1] == 0.5  # 2 * 0.5 / 2.0


def summary_points(fixed, adaptive):
    """Figure 3's points as method_summary gives them: SR (method "sr") at each α, adaptive SR
    (method "sr-adaptive", its fallback α in the setting too) at each δ."""
    rows = [{"method": "bon", "setting": '{"n":16}', "method_label": "Bo16",
             "relative_compute": 1.0, "improvement": 100.0}]
    rows += [{"method": "sr", "setting": f'{{"alpha":{a},"min_tokens":8}}', "method_label": f"SR α={a:g}",
              "relative_compute": c, "improvement": i} for a, c, i in fixed]
    rows += [{"method": "sr-adaptive", "setting": f'{{"alpha":0.5,"delta":{d}}}', "method_label": f"SR δ={d:g}",
              "relative_compute": c, "improvement": i} for d, c, i in adaptive]
    return pd.DataFrame(rows)


def test_against_fixed_alpha_by_hand():
    summary = summary_points(fixed=[(0.5, 1.0, 100.0), (0.9, 4.0, 120.0)],
                             adaptive=[(0.1, 8.0, 118.0), (0.01, 2.0, 115.0), (0.5, 0.5, 105.0)])
    table = against_fixed_alpha(summary)
    assert table["delta"].tolist() == [0.01, 0.1, 0.5]  # read from the settings, in order of δ
    table = table.set_index("delta")
    # compute 2 is half-way between 1 and 4 in log compute: the curve reads 110 there
    assert table.loc[0.01, "status"] == "inside"
    assert table.loc[0.01, "fixed_alpha_improvement"] == pytest.approx(110.0)
    assert table.loc[0.01, "gap"] == pytest.approx(5.0)
    assert table.loc[0.1, "status"] == "above_range"
    assert math.isnan(table.loc[0.1, "gap"])
    assert (table.loc[0.1, "dominated_by"], table.loc[0.1, "dominates"]) == ("SR α=0.9", "")
    assert table.loc[0.5, "status"] == "below_range"
    assert (table.loc[0.5, "dominated_by"], table.loc[0.5, "dominates"]) == ("", "SR α=0.5")


def test_against_fixed_alpha_interval_from_resamples():
    summary = summary_points(fixed=[(0.5, 1.0, 100.0), (0.9, 4.0, 120.0)], adaptive=[(0.01, 2.0, 115.0)])
    draws = pd.concat([
        summary.assign(resample=0),  # gap 5
        summary_points(fixed=[(0.5, 1.0, 100.0), (0.9, 4.0, 130.0)], adaptive=[(0.01, 2.0, 115.0)])
        .assign(resample=1),  # the curve reads 115 at compute 2: gap 0
        summary_points(fixed=[(0.5, 1.0, 100.0), (0.9, 4.0, 130.0)], adaptive=[(0.01, 5.0, 115.0)])
        .assign(resample=2),  # dearer than every fixed alpha in this resample: no gap
    ])
    row = against_fixed_alpha(summary, draws).iloc[0]
    assert row["in_range_frac"] == pytest.approx(2 / 3)
    # percentiles 2.5 and 97.5 of {0, 5}
    assert (row["gap_lo"], row["gap_hi"]) == pytest.approx((0.125, 4.875))


def test_sr_param_reads_a_setting():
    assert sr_param('{"alpha":0.5,"delta":0.05}', "delta") == 0.05
    assert math.isnan(sr_param('{"alpha":0.5}', "delta")) and math.isnan(sr_param(math.nan, "delta"))
