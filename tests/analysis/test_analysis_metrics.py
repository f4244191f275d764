"""analysis.metrics on small hand-computed runs."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.metrics import (
    bon_equivalent_compute,
    interpolate_log_compute,
    method_label,
    method_summary,
    per_prompt_improvement,
    perplexity,
)

pytestmark = pytest.mark.filterwarnings("error")

# Two prompts, three BoN sizes and one SR setting.  Per prompt: (Bo8, Bo32, Bo128, SR) scores.
SCORES = {"p1": (1.0, 2.0, 3.0, 2.5), "p2": (0.0, 4.0, 10.0, 5.0)}
# Seconds per prompt and parallel shards: Bo128 ran as 4 parallel shards of 4 s each.
TIMING = {"bo8": (1.0, 1), "bo32": (4.0, 1), "bo128": (4.0, 4), "sr": (2.0, 1)}
CONFIGS = [("bon", 8, math.nan, "bo8"), ("bon", 32, math.nan, "bo32"),
           ("bon", 128, math.nan, "bo128"), ("sr", 128, 0.5, "sr")]


def hand_runs(scores=SCORES) -> pd.DataFrame:
    rows = []
    for prompt_id, prompt_scores in scores.items():
        for (method, n, alpha, key), score in zip(CONFIGS, prompt_scores, strict=True):
            time_s, shards = TIMING[key]
            rows.append({"method": method, "n": n, "alpha": alpha, "prompt_id": prompt_id,
                         "score": score, "time_s": time_s, "shards": shards})
    return pd.DataFrame(rows)


def by_label(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.set_index("method_label")


def test_improvement_is_100_for_bon_min_and_200_for_the_largest_bon():
    summary = by_label(method_summary(hand_runs()))
    assert summary.loc["Bo8", "improvement"] == 100.0
    assert summary.loc["Bo128", "improvement"] == 200.0
    # Bo32: p1 100·(1 + 1/2) = 150, p2 100·(1 + 4/10) = 140 → mean 145.
    assert summary.loc["Bo32", "improvement"] == pytest.approx(145.0)
    # SR: p1 100·(1 + 1.5/2) = 175, p2 100·(1 + 5/10) = 150 → mean 162.5.
    assert summary.loc["SR α=0.5", "improvement"] == pytest.approx(162.5)


def test_improvement_against_the_best_of_all_methods_caps_at_200():
    runs = hand_runs({"p1": (1.0, 2.0, 3.0, 4.0), "p2": (0.0, 4.0, 10.0, 5.0)})
    largest = per_prompt_improvement(runs, "largest_bon")
    everyone = per_prompt_improvement(runs, "all_methods")
    sr_p1 = (runs["method"] == "sr") & (runs["prompt_id"] == "p1")
    assert largest[sr_p1].item() == pytest.approx(250.0)  # 100·(1 + 3/2)
    assert everyone[sr_p1].item() == pytest.approx(200.0)  # SR itself is the reference maximum
    bo128_p1 = (runs["n"] == 128) & (runs["method"] == "bon") & (runs["prompt_id"] == "p1")
    assert everyone[bo128_p1].item() == pytest.approx(100 * (1 + 2 / 3))


def test_a_prompt_with_an_empty_reward_range_is_left_out_of_the_mean():
    runs = hand_runs({"p1": (1.0, 2.0, 3.0, 2.5), "p2": (4.0, 4.0, 4.0, 4.0)})
    summary = by_label(method_summary(runs))
    assert summary.loc["Bo32", "improvement"] == pytest.approx(150.0)  # p1 only
    assert summary.loc["Bo32", "n_prompts_improvement"] == 1
    assert summary.loc["Bo32", "n_prompts"] == 2


def test_relative_compute_counts_shards_and_speedup_is_against_the_largest_bon():
    summary = by_label(method_summary(hand_runs()))
    # Compute over two prompts: Bo8 2 s, Bo32 8 s, Bo128 2 × 4 shards × 4 s = 32 s, SR 4 s.
    assert summary["compute_s"].to_dict() == {"Bo8": 2.0, "Bo32": 8.0, "Bo128": 32.0, "SR α=0.5": 4.0}
    assert summary["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "Bo128": 16.0, "SR α=0.5": 2.0}
    assert summary.loc["SR α=0.5", "speedup_vs_largest_bon"] == 8.0
    assert summary.loc["Bo128", "speedup_vs_largest_bon"] == 1.0


def test_prompts_missing_from_any_configuration_are_excluded():
    runs = hand_runs()
    only_bon = hand_runs({"p3": (0.0, 1.0, 2.0, 9.0)}).query("method == 'bon'")
    summary = by_label(method_summary(pd.concat([runs, only_bon])))
    assert (summary["n_prompts"] == 2).all()
    assert summary.loc["Bo32", "improvement"] == pytest.approx(145.0)


def test_summary_is_computed_per_group():
    runs = pd.concat([hand_runs().assign(pair="A"), hand_runs().assign(pair="B", time_s=lambda f: f["time_s"] * 3)])
    summary = method_summary(runs, by=["pair"])
    assert list(summary.columns[:4]) == ["pair", "method", "n", "alpha"]
    assert len(summary) == 8
    # Tripling every time leaves ratios unchanged.
    assert summary.groupby("method_label")["relative_compute"].nunique().eq(1).all()


def test_duplicate_rows_for_a_configuration_and_prompt_are_rejected():
    runs = hand_runs()
    with pytest.raises(ValueError, match="several rows"):
        method_summary(pd.concat([runs, runs.iloc[:1]]))


def test_log_compute_interpolation_on_a_known_curve():
    compute, score = [1, 2, 4, 8], [100, 120, 140, 160]
    value, status = interpolate_log_compute(compute, score, 130)
    assert status == "interpolated"
    assert value == pytest.approx(math.sqrt(2 * 4))  # halfway between 2 and 4 in log space
    assert interpolate_log_compute(compute, score, 160) == (pytest.approx(8.0), "interpolated")
    assert interpolate_log_compute(compute, score, 100) == (pytest.approx(1.0), "interpolated")


def test_interpolation_outside_the_curve_is_flagged_not_extrapolated():
    compute, score = [1, 2, 4], [100, 120, 140]
    below, below_status = interpolate_log_compute(compute, score, 90)
    above, above_status = interpolate_log_compute(compute, score, 150)
    assert math.isnan(below) and below_status == "below_range"
    assert math.isnan(above) and above_status == "above_range"


def test_interpolation_uses_the_cheapest_crossing_of_a_non_monotone_curve():
    # Unsorted input; in compute order the scores are 100, 150, 140, 160.
    value, _ = interpolate_log_compute([4, 1, 8, 2], [140, 100, 160, 150], 145)
    assert value == pytest.approx(2 ** 0.9)  # 45/50 of the way from 1 to 2 in log space


def test_bon_equivalent_compute_of_the_sr_run():
    located = bon_equivalent_compute(method_summary(hand_runs()))
    assert located["method_label"].tolist() == ["SR α=0.5"]
    row = located.iloc[0]
    # SR's 162.5 lies between Bo32 (4, 145) and Bo128 (16, 200).
    expected = 4 * 4 ** ((162.5 - 145) / (200 - 145))
    assert row["bon_equivalent_status"] == "interpolated"
    assert row["bon_equivalent_compute"] == pytest.approx(expected)
    assert row["compute_speedup"] == pytest.approx(expected / 2.0)


def test_perplexity_is_exp_of_minus_the_mean_logprob():
    assert perplexity(np.log([0.5, 0.5, 0.5])) == pytest.approx(2.0)
    assert perplexity([math.log(0.25), math.log(1.0)]) == pytest.approx(2.0)  # exp(ln 4 / 2)
    assert math.isnan(perplexity([]))


def test_mean_perplexity_of_returned_responses_per_configuration():
    runs = hand_runs().assign(perplexity=lambda frame: np.where(frame["prompt_id"] == "p1", 2.0, 4.0))
    assert (by_label(method_summary(runs))["perplexity"] == 3.0).all()


def test_method_labels():
    assert method_label("bon", 120, math.nan) == "Bo120"
    assert method_label("sr", 120, 0.5) == "SR α=0.5"
    with pytest.raises(ValueError):
        method_label("beam", 4, math.nan)
