"""analysis.metrics and analysis.bon_curve on small hand-computed runs."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.bootstrap import percentile_interval
from analysis.bon_curve import bon_equivalent_compute, interpolate_log_compute, locate_on_curves
from analysis.metrics import (
    bootstrap_draws,
    method_summary,
    per_prompt_improvement,
    perplexity,
    zero_spread_prompts,
)

pytestmark = pytest.mark.filterwarnings("error")

# Two prompts, three BoN sizes and one SR setting.  Per prompt: (Bo8, Bo32, Bo128, SR) scores.
SCORES = {"p1": (1.0, 2.0, 3.0, 2.5), "p2": (0.0, 4.0, 10.0, 5.0)}
# Bo8's lowest candidate reward per prompt: eq. 8 spreads (best - worst) of 2 and 10.
BO8_WORST = {"p1": -1.0, "p2": -10.0}
# Seconds per prompt and parallel shards: Bo128 ran as 4 parallel shards of 4 s each.
TIMING = {"bo8": (1.0, 1), "bo32": (4.0, 1), "bo128": (4.0, 4), "sr": (2.0, 1)}
# (method, n, setting, method_label, key): the configuration columns of analysis.io's runs frame.
CONFIGS = [("bon", 8, '{"n":8}', "Bo8", "bo8"), ("bon", 32, '{"n":32}', "Bo32", "bo32"),
           ("bon", 128, '{"n":128}', "Bo128", "bo128"), ("sr", 128, '{"alpha":0.5}', "SR α=0.5", "sr")]


def sr_config(alpha: float) -> dict:
    """The configuration columns of SR at ``alpha``, written out by hand."""
    return {"method": "sr", "setting": f'{{"alpha":{alpha}}}', "method_label": f"SR α={alpha}"}


BON_120, BON_3840 = ({"method": "bon", "n": n, "setting": f'{{"n":{n}}}', "method_label": f"Bo{n}"}
                     for n in (120, 3840))


def hand_runs(scores=SCORES, bo8_worst=BO8_WORST) -> pd.DataFrame:
    rows = []
    for prompt_id, prompt_scores in scores.items():
        for (method, n, setting, label, key), score in zip(CONFIGS, prompt_scores, strict=True):
            time_s, shards = TIMING[key]
            # Only Bo-N_min's worst score matters; the others get an arbitrary lower value.
            worst = bo8_worst[prompt_id] if key == "bo8" else score - 100.0
            rows.append({"method": method, "n": n, "setting": setting, "method_label": label,
                         "prompt_id": prompt_id, "score": score, "worst_score": worst, "time_s": time_s,
                         "shards": shards})
    return pd.DataFrame(rows)


def eq8_runs(per_prompt: dict) -> pd.DataFrame:
    """Bo-N_min, the largest BoN and SR; per prompt (Bo-N_min best, Bo-N_min worst, largest best, SR)."""
    rows = []
    for prompt_id, (best, worst, largest, sr) in per_prompt.items():
        rows += [
            {**BON_120, "prompt_id": prompt_id, "score": best, "worst_score": worst, "time_s": 1.0},
            {**BON_3840, "prompt_id": prompt_id, "score": largest, "worst_score": worst - 1.0, "time_s": 32.0},
            {**sr_config(0.5), "n": 3840, "prompt_id": prompt_id, "score": sr, "worst_score": math.nan,
             "time_s": 2.0},
        ]
    return pd.DataFrame(rows)


def random_runs(n_prompts=60, seed=0) -> pd.DataFrame:
    """Bo8 < Bo32 < Bo128 in expectation, SR between Bo32 and Bo128, noisy times."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_prompts):
        best8 = rng.normal(0, 1)
        worst8 = best8 - rng.uniform(1, 3)
        for config, n, mean_gain, time_s in [
            ({"method": "bon", "setting": '{"n":8}', "method_label": "Bo8"}, 8, 0.0, 1.0),
            ({"method": "bon", "setting": '{"n":32}', "method_label": "Bo32"}, 32, 0.6, 4.0),
            ({"method": "bon", "setting": '{"n":128}', "method_label": "Bo128"}, 128, 1.2, 16.0),
            (sr_config(0.5), 128, 0.9, 2.0), (sr_config(0.9), 128, 0.5, 1.0),
        ]:
            rows.append({**config, "n": n, "prompt_id": f"p{p}",
                         "score": best8 + (mean_gain + rng.normal(0, 0.3) if mean_gain else 0.0),
                         "worst_score": worst8 if config["method_label"] == "Bo8" else math.nan,
                         "time_s": time_s * rng.uniform(0.5, 1.5)})
    return pd.DataFrame(rows)


def by_label(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.set_index("method_label")


# --- eq. 8 -------------------------------------------------------------------------------


def test_eq8_improvement_on_a_hand_worked_example():
    # Bo-N_min: best 1.0, worst -2.0 on both prompts (spread 3).  SR 0.9 and 1.8:
    # p1: 100·(1 - (1.0 - 0.9)/3) = 96.667; p2: 100·(1 - (1.0 - 1.8)/3) = 126.667 → mean 111.667.
    runs = eq8_runs({"p1": (1.0, -2.0, 1.01, 0.90), "p2": (1.0, -2.0, 2.0, 1.80)})
    summary = by_label(method_summary(runs, n_resamples=0))
    assert summary.loc["SR α=0.5", "improvement"] == pytest.approx((96.6666667 + 126.6666667) / 2)
    assert summary.loc["SR α=0.5", "improvement"] == pytest.approx(111.67, abs=0.005)
    assert summary.loc["Bo120", "improvement"] == 100.0
    # Largest BoN: p1 100·(1 + 0.01/3), p2 100·(1 + 1/3).
    assert summary.loc["Bo3840", "improvement"] == pytest.approx(100 * (1 + (0.01 / 3 + 1 / 3) / 2))
    assert (summary["n_prompts_improvement"] == 2).all()
    assert (summary["zero_spread_prompts"] == "").all()


def test_the_old_largest_bon_normalisation_is_an_explicit_alternative():
    runs = eq8_runs({"p1": (1.0, -2.0, 1.01, 0.90), "p2": (1.0, -2.0, 2.0, 1.80)})
    summary = by_label(method_summary(runs, normalization="bon_range", n_resamples=0))
    # p1: 100·(1 + (0.9 - 1.0)/0.01) = -900; p2: 100·(1 + 0.8/1.0) = 180 → mean -360: a tiny
    # Bo-N_min-to-largest gap on p1 blows the score up, which eq. 8 avoids.
    assert summary.loc["SR α=0.5", "improvement"] == pytest.approx(-360.0)
    assert summary.loc["Bo3840", "improvement"] == pytest.approx(200.0)
    with pytest.raises(ValueError, match="normalization"):
        method_summary(runs, normalization="largest_bon")


def test_eq8_needs_the_worst_score():
    with pytest.raises(ValueError, match="worst_score"):
        method_summary(hand_runs().drop(columns="worst_score"))
    # The alternative normalisation does not.
    method_summary(hand_runs().drop(columns="worst_score"), normalization="bon_range", n_resamples=0)


def test_improvement_of_the_hand_runs():
    summary = by_label(method_summary(hand_runs(), n_resamples=0))
    assert summary.loc["Bo8", "improvement"] == 100.0
    # Bo32: p1 100·(1 + 1/2) = 150, p2 100·(1 + 4/10) = 140 → 145.  Bo128: 200 on both.
    assert summary.loc["Bo32", "improvement"] == pytest.approx(145.0)
    assert summary.loc["Bo128", "improvement"] == pytest.approx(200.0)
    # SR: p1 100·(1 + 1.5/2) = 175, p2 100·(1 + 5/10) = 150 → 162.5.
    assert summary.loc["SR α=0.5", "improvement"] == pytest.approx(162.5)


def test_a_zero_spread_prompt_is_counted_and_named_not_dropped_silently():
    runs = hand_runs(bo8_worst={"p1": -1.0, "p2": 0.0})  # p2: Bo8's candidates all scored 0.0
    assert zero_spread_prompts(runs) == ["p2"]
    improvement = per_prompt_improvement(runs)
    assert improvement[runs["prompt_id"] == "p2"].isna().all()
    summary = by_label(method_summary(runs, n_resamples=200))
    assert summary.loc["Bo32", "improvement"] == pytest.approx(150.0)  # p1 only
    assert (summary["n_prompts_improvement"] == 1).all()
    assert (summary["n_prompts"] == 2).all()
    assert (summary["zero_spread_prompts"] == "p2").all()
    # Compute still uses both prompts.
    assert summary.loc["Bo32", "relative_compute"] == 4.0


def test_a_non_finite_spread_is_treated_like_a_zero_one():
    runs = hand_runs(bo8_worst={"p1": math.nan, "p2": -10.0})
    summary = by_label(method_summary(runs, n_resamples=0))
    assert summary.loc["Bo32", "zero_spread_prompts"] == "p1"
    assert summary.loc["Bo32", "improvement"] == pytest.approx(140.0)


def test_all_prompts_zero_spread_gives_nan_without_warnings():
    runs = hand_runs(bo8_worst={"p1": 1.0, "p2": 0.0})
    summary = method_summary(runs, n_resamples=50)
    assert summary["improvement"].isna().all() and summary["improvement_lo"].isna().all()
    assert (summary["zero_spread_prompts"] == "p1,p2").all()
    located = bon_equivalent_compute(summary, draws=bootstrap_draws(runs, n_resamples=50))
    assert located["bon_equivalent_status"].tolist() == ["no_score"]
    assert located["bon_equivalent_in_range_frac"].tolist() == [0.0]


# --- eq. 7 ---------------------------------------------------------------------------------


def test_relative_compute_counts_shards_and_speedup_is_against_the_largest_bon():
    summary = by_label(method_summary(hand_runs()))
    # Compute over two prompts: Bo8 2 s, Bo32 8 s, Bo128 2 × 4 shards × 4 s = 32 s, SR 4 s.
    assert summary["compute_s"].to_dict() == {"Bo8": 2.0, "Bo32": 8.0, "Bo128": 32.0, "SR α=0.5": 4.0}
    assert summary["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "Bo128": 16.0, "SR α=0.5": 2.0}
    assert summary.loc["SR α=0.5", "speedup_vs_largest_bon"] == 8.0
    assert summary.loc["Bo128", "speedup_vs_largest_bon"] == 1.0


def test_prompts_missing_from_any_configuration_are_excluded():
    runs = hand_runs()
    only_bon = hand_runs({"p3": (0.0, 1.0, 2.0, 9.0)}, {"p3": -1.0}).query("method == 'bon'")
    summary = by_label(method_summary(pd.concat([runs, only_bon])))
    assert (summary["n_prompts"] == 2).all()
    assert summary.loc["Bo32", "improvement"] == pytest.approx(145.0)


def test_summary_is_computed_per_group():
    runs = pd.concat([hand_runs().assign(pair="A"), hand_runs().assign(pair="B", time_s=lambda f: f["time_s"] * 3)])
    summary = method_summary(runs, by=["pair"], n_resamples=100)
    assert list(summary.columns[:5]) == ["pair", "method", "setting", "method_label", "n"]
    assert len(summary) == 8
    # Tripling every time leaves ratios, and their intervals, unchanged.
    for column in ("relative_compute", "relative_compute_lo", "relative_compute_hi", "improvement_hi"):
        assert summary.groupby("method_label")[column].nunique().eq(1).all(), column


def test_duplicate_rows_for_a_configuration_and_prompt_are_rejected():
    runs = hand_runs()
    with pytest.raises(ValueError, match="several rows"):
        method_summary(pd.concat([runs, runs.iloc[:1]]))


def test_the_measured_seconds_stand_beside_a_modelled_eq7():
    # work_s is what eq. 7 counts (here: modelled), cpu_s the measured seconds beside it: each ratio
    # from its own column. Bo-N_min's work 1 + 1, cpu 2 + 2; every other row's work 3, cpu 5 per prompt.
    runs = hand_runs()
    reference = (runs["method"] == "bon") & (runs["n"] == runs["n"].min())
    runs = runs.assign(work_s=np.where(reference, 1.0, 3.0), cpu_s=np.where(reference, 2.0, 5.0), shards=1)
    summary = method_summary(runs, n_resamples=0).set_index("method_label")
    others = summary.index[summary.index != summary.index[0]]
    assert (summary.loc[others, "relative_compute"] == 3.0).all()
    assert (summary.loc[others, "relative_cpu"] == 2.5).all()
    assert method_summary(hand_runs(), n_resamples=0)["relative_cpu"].isna().all()  # no cpu_s: no ratio


def test_summary_columns():
    runs = hand_runs().assign(perplexity=2.0)
    assert list(method_summary(runs).columns) == [
        "method", "setting", "method_label", "n", "method_name", "color", "marker", "reference", "n_prompts",
        "mean_score", "improvement",
        "n_prompts_improvement", "zero_spread_prompts", "compute_s", "relative_compute",
        "speedup_vs_largest_bon", "wall_s", "relative_wall", "wall_speedup_vs_largest_bon", "cpu_s", "relative_cpu",
        "compute_flops",
        "relative_flops", "flops_speedup_vs_largest_bon",
        "perplexity", "improvement_lo", "improvement_hi", "relative_compute_lo", "relative_compute_hi",
        "speedup_vs_largest_bon_lo", "speedup_vs_largest_bon_hi", "relative_wall_lo", "relative_wall_hi",
        "wall_speedup_vs_largest_bon_lo", "wall_speedup_vs_largest_bon_hi", "relative_cpu_lo", "relative_cpu_hi",
        "relative_flops_lo", "relative_flops_hi",
        "flops_speedup_vs_largest_bon_lo", "flops_speedup_vs_largest_bon_hi", "perplexity_lo", "perplexity_hi",
        "confidence_level", "bootstrap_resamples",
    ]


# --- paired bootstrap ----------------------------------------------------------------------


def test_point_estimates_do_not_depend_on_the_bootstrap():
    runs = random_runs()
    with_ci = method_summary(runs, n_resamples=300, seed=1)
    without = method_summary(runs, n_resamples=0)
    columns = ["improvement", "relative_compute", "speedup_vs_largest_bon", "mean_score"]
    pd.testing.assert_frame_equal(with_ci[columns], without[columns])
    assert without["improvement_lo"].isna().all()
    # ... and equal the plain formulas.
    sr = runs[runs["method_label"] == "SR α=0.5"]
    bo8 = runs[runs["n"] == 8].set_index("prompt_id")
    spread = bo8["score"] - bo8["worst_score"]
    plain = (100 * (1 - (bo8["score"] - sr.set_index("prompt_id")["score"]) / spread)).mean()
    row = by_label(with_ci).loc["SR α=0.5"]
    assert row["improvement"] == pytest.approx(plain)
    assert row["relative_compute"] == pytest.approx(sr["time_s"].sum() / bo8["time_s"].sum())


def test_a_constant_statistic_has_a_degenerate_interval_thanks_to_pairing():
    # SR takes exactly twice Bo-N_min's time on every prompt, while prompt times vary 10-fold:
    # an unpaired bootstrap would spread the ratio, a paired one keeps it at 2 on every resample.
    runs = random_runs(seed=2)
    bo8_time = runs[runs["n"] == 8].set_index("prompt_id")["time_s"]
    sr = runs["method_label"] == "SR α=0.5"
    runs.loc[sr, "time_s"] = 2 * runs.loc[sr, "prompt_id"].map(bo8_time * np.linspace(1, 10, len(bo8_time))).values
    runs.loc[runs["n"] == 8, "time_s"] = runs.loc[runs["n"] == 8, "time_s"] * np.linspace(1, 10, len(bo8_time))
    row = by_label(method_summary(runs, n_resamples=300)).loc["SR α=0.5"]
    assert row["relative_compute"] == pytest.approx(2.0)
    assert row["relative_compute_lo"] == pytest.approx(2.0) and row["relative_compute_hi"] == pytest.approx(2.0)
    bo_min = by_label(method_summary(runs, n_resamples=300)).loc["Bo8"]
    assert (bo_min["improvement_lo"], bo_min["improvement_hi"]) == (100.0, 100.0)


def test_the_same_resamples_serve_every_configuration():
    runs = random_runs(seed=4)
    # A second SR configuration with exactly SR α=0.5's per-prompt data.
    twin = runs[runs["method_label"] == "SR α=0.5"].assign(**sr_config(0.6))
    summary = by_label(method_summary(pd.concat([runs, twin]), n_resamples=300))
    columns = ["improvement_lo", "improvement_hi", "relative_compute_lo", "relative_compute_hi"]
    pd.testing.assert_series_equal(summary.loc["SR α=0.5", columns], summary.loc["SR α=0.6", columns],
                                   check_names=False)
    draws = bootstrap_draws(pd.concat([runs, twin]), n_resamples=300)
    a, b = (draws[draws["method_label"] == label].reset_index(drop=True) for label in ("SR α=0.5", "SR α=0.6"))
    np.testing.assert_array_equal(a["improvement"], b["improvement"])


def test_the_bootstrap_is_reproducible_with_a_seed():
    runs = random_runs(seed=5)
    first, again = method_summary(runs, n_resamples=200, seed=9), method_summary(runs, n_resamples=200, seed=9)
    pd.testing.assert_frame_equal(first, again)
    other = method_summary(runs, n_resamples=200, seed=10)
    assert not np.allclose(first["improvement_lo"], other["improvement_lo"])


def test_the_interval_brackets_the_estimate_and_matches_scipy_for_a_mean():
    runs = random_runs(n_prompts=200, seed=6)
    summary = by_label(method_summary(runs, n_resamples=2000, seed=0))
    for label in ("Bo32", "Bo128", "SR α=0.5", "SR α=0.9"):
        row = summary.loc[label]
        assert row["improvement_lo"] < row["improvement"] < row["improvement_hi"]
        assert row["relative_compute_lo"] < row["relative_compute"] < row["relative_compute_hi"]
    # Improvement is a plain mean over prompts: scipy's percentile bootstrap gives nearly the same.
    sr = runs[runs["method_label"] == "SR α=0.5"].sort_values("prompt_id")
    per_prompt = per_prompt_improvement(pd.concat([runs[runs["method"] == "bon"], sr])).loc[sr.index]
    reference = stats.bootstrap((per_prompt.to_numpy(),), np.mean, n_resamples=2000, method="percentile",
                                rng=np.random.default_rng(0)).confidence_interval
    width = reference.high - reference.low
    assert summary.loc["SR α=0.5", "improvement_lo"] == pytest.approx(reference.low, abs=0.1 * width)
    assert summary.loc["SR α=0.5", "improvement_hi"] == pytest.approx(reference.high, abs=0.1 * width)


def test_draws_are_the_resamples_behind_the_summary_intervals():
    runs = random_runs(seed=7)
    summary = by_label(method_summary(runs, n_resamples=400, seed=3))
    draws = bootstrap_draws(runs, n_resamples=400, seed=3)
    assert len(draws) == 5 * 400
    sr = draws[draws["method_label"] == "SR α=0.5"]
    (low, high), = percentile_interval(sr["relative_compute"].to_numpy())
    assert (low, high) == pytest.approx((summary.loc["SR α=0.5", "relative_compute_lo"],
                                         summary.loc["SR α=0.5", "relative_compute_hi"]))


# --- BoN-equivalent compute ----------------------------------------------------------------


def test_log_compute_interpolation_on_a_known_curve():
    compute, score = [1, 2, 4, 8], [100, 120, 140, 160]
    value, status, extrapolated = interpolate_log_compute(compute, score, 130)
    assert status == "interpolated" and math.isnan(extrapolated)
    assert value == pytest.approx(math.sqrt(2 * 4))  # halfway between 2 and 4 in log space


def test_an_exact_hit_returns_that_points_compute():
    compute, score = [1, 2, 4, 8], [100, 120, 140, 160]
    for target, expected in [(100, 1.0), (120, 2.0), (140, 4.0), (160, 8.0)]:
        found = interpolate_log_compute(compute, score, target)
        assert (found.compute, found.status) == (pytest.approx(expected), "interpolated")


def test_outside_the_curve_is_flagged_and_extrapolated_separately():
    compute, score = [1, 2, 4], [100, 120, 140]
    below = interpolate_log_compute(compute, score, 90)
    above = interpolate_log_compute(compute, score, 150)
    assert math.isnan(below.compute) and below.status == "below_range"
    assert math.isnan(above.compute) and above.status == "above_range"
    # The line through the first two points: 20 points per doubling, so 10 below 100 is 2^-0.5.
    assert below.extrapolated == pytest.approx(2 ** -0.5)
    # Through the last two: 10 above 140 is half a doubling past 4.
    assert above.extrapolated == pytest.approx(4 * 2 ** 0.5)


def test_a_non_monotone_curve_is_walked_in_compute_order():
    compute, score = [1, 2, 4, 8], [100, 90, 120, 130]
    # Below Bo-N_min's 100 is below range even though the 2× point dips to 90.
    found = interpolate_log_compute(compute, score, 95)
    assert found.status == "below_range" and math.isnan(found.compute)
    assert math.isnan(found.extrapolated)  # the first two points fall: no line to extrapolate
    # 105: the first point reaching it is 4× (120), the one before it 2× (90): halfway in score.
    found = interpolate_log_compute(compute, score, 105)
    assert found.status == "interpolated" and found.compute == pytest.approx(2 ** 1.5)
    # Unsorted input; in compute order the scores are 100, 150, 140, 160.
    value, status, _ = interpolate_log_compute([4, 1, 8, 2], [140, 100, 160, 150], 145)
    assert status == "interpolated" and value == pytest.approx(2 ** 0.9)  # 45/50 from 1 to 2


def test_degenerate_curves_and_targets():
    assert interpolate_log_compute([], [], 1.0).status == "no_curve"
    assert interpolate_log_compute([1, 2], [1.0, 2.0], math.nan).status == "no_score"
    assert interpolate_log_compute([1, math.nan, 4], [1.0, 5.0, 3.0], 2.0).compute == pytest.approx(2.0)


def test_the_vectorised_location_agrees_with_the_scalar_one():
    rng = np.random.default_rng(8)
    compute = np.sort(rng.uniform(0.5, 40, size=(5, 300)), axis=0)
    score = 100 + np.cumsum(rng.normal(10, 12, size=(5, 300)), axis=0)
    targets = rng.uniform(80, 170, size=300)
    located, status, extrapolated = locate_on_curves(compute, score, targets)
    for r in range(300):
        one = interpolate_log_compute(compute[:, r], score[:, r], targets[r])
        assert one.status == status[r]
        np.testing.assert_allclose([one.compute, one.extrapolated], [located[r], extrapolated[r]])
    assert {"interpolated", "below_range", "above_range"} <= set(status)


def test_bon_equivalent_compute_of_the_sr_run():
    runs = hand_runs()
    located = bon_equivalent_compute(method_summary(runs), draws=bootstrap_draws(runs))
    assert located["method_label"].tolist() == ["SR α=0.5"]
    row = located.iloc[0]
    # SR's 162.5 lies between Bo32 (4, 145) and Bo128 (16, 200).
    expected = 4 * 4 ** ((162.5 - 145) / (200 - 145))
    assert row["bon_equivalent_status"] == "interpolated"
    assert row["bon_equivalent_compute"] == pytest.approx(expected)
    assert row["compute_speedup"] == pytest.approx(expected / 2.0)
    assert math.isnan(row["bon_equivalent_compute_extrapolated"])
    # SR is between Bo32 and Bo128 on both prompts, so on every resample.
    assert row["bon_equivalent_in_range_frac"] == 1.0
    assert row["bon_equivalent_compute_lo"] <= expected <= row["bon_equivalent_compute_hi"]


def test_bon_equivalent_compute_above_the_largest_bon():
    runs = hand_runs({"p1": (1.0, 2.0, 3.0, 4.0), "p2": (0.0, 4.0, 10.0, 12.0)})
    located = bon_equivalent_compute(method_summary(runs), draws=bootstrap_draws(runs)).iloc[0]
    # SR: p1 100·(1 + 3/2) = 250, p2 100·(1 + 12/10) = 220 → 235 > Bo128's 200.
    assert located["bon_equivalent_status"] == "above_range"
    assert math.isnan(located["bon_equivalent_compute"]) and math.isnan(located["compute_speedup"])
    expected = 16 * 4 ** ((235 - 200) / (200 - 145))
    assert located["bon_equivalent_compute_extrapolated"] == pytest.approx(expected)
    assert located["compute_speedup_extrapolated"] == pytest.approx(expected / 2.0)
    assert located["bon_equivalent_in_range_frac"] == 0.0 and located["bon_equivalent_above_frac"] == 1.0
    # every resample lies above its curve: censored at the largest BoN's compute (Bo128 = 16 x Bo8 on
    # every resample, as each prompt's compute ratio is the same), so the speedup is at least 16 / 2
    # and both limits are that bound
    assert (located["bon_equivalent_compute_lo"], located["bon_equivalent_compute_hi"]) == pytest.approx((16, 16))
    assert (located["compute_speedup_lo"], located["compute_speedup_hi"]) == pytest.approx((8.0, 8.0))
    assert located["compute_speedup_hi_is_bound"] and not located["compute_speedup_lo_is_bound"]


def test_bon_equivalent_compute_per_group_with_partial_coverage():
    runs = random_runs(seed=11)
    grouped = pd.concat([runs.assign(pair="A"), random_runs(seed=12).assign(pair="B")])
    summary = method_summary(grouped, by=["pair"], n_resamples=300)
    located = bon_equivalent_compute(summary, by=["pair"], draws=bootstrap_draws(grouped, by=["pair"], n_resamples=300))
    assert located[["pair", "method_label"]].values.tolist() == [
        ["A", "SR α=0.5"], ["A", "SR α=0.9"], ["B", "SR α=0.5"], ["B", "SR α=0.9"]]
    assert located["bon_equivalent_in_range_frac"].between(0, 1).all()
    inside = located[located["bon_equivalent_status"] == "interpolated"]
    assert not inside.empty
    assert (inside["bon_equivalent_compute_lo"] <= inside["bon_equivalent_compute_hi"]).all()
    # Without draws: the point estimates only.
    plain = bon_equivalent_compute(summary, by=["pair"])
    pd.testing.assert_series_equal(plain["bon_equivalent_compute"], located["bon_equivalent_compute"])
    assert plain["bon_equivalent_in_range_frac"].isna().all()


# --- perplexity and labels -----------------------------------------------------------------


def test_perplexity_is_exp_of_minus_the_mean_logprob():
    assert perplexity(np.log([0.5, 0.5, 0.5])) == pytest.approx(2.0)
    assert perplexity([math.log(0.25), math.log(1.0)]) == pytest.approx(2.0)  # exp(ln 4 / 2)
    assert math.isnan(perplexity([]))


def test_mean_perplexity_of_returned_responses_per_configuration():
    runs = hand_runs().assign(perplexity=lambda frame: np.where(frame["prompt_id"] == "p1", 2.0, 4.0))
    summary = by_label(method_summary(runs))
    assert (summary["perplexity"] == 3.0).all()
    assert (summary["perplexity_lo"] >= 2.0).all() and (summary["perplexity_hi"] <= 4.0).all()


# --- FLOPs -----------------------------------------------------------------------------------

# FLOPs per prompt (p1, p2): the ratio of summed FLOPs, as relative compute is one of summed seconds.
FLOPS = {"bo8": (10.0, 30.0), "bo32": (40.0, 120.0), "bo128": (160.0, 480.0), "sr": (15.0, 25.0)}


def with_flops(runs: pd.DataFrame, flops=FLOPS) -> pd.DataFrame:
    key = {label: key for _, _, _, label, key in CONFIGS}
    return runs.assign(flops=[flops[key[label]][0 if prompt == "p1" else 1]
                              for label, prompt in zip(runs["method_label"], runs["prompt_id"], strict=True)])


def test_relative_flops_on_a_hand_worked_two_prompt_example():
    summary = by_label(method_summary(with_flops(hand_runs()), n_resamples=1000))
    # Summed over p1 and p2: Bo8 10 + 30 = 40, Bo32 160, Bo128 640, SR 15 + 25 = 40.
    assert summary["compute_flops"].to_dict() == {"Bo8": 40.0, "Bo32": 160.0, "Bo128": 640.0, "SR α=0.5": 40.0}
    # relative_flops = SR's summed FLOPs / Bo8's = 40 / 40 = 1.0 (not the mean of the per-prompt
    # ratios, (1.5 + 0.833) / 2 = 1.17); the FLOP speedup against Bo128 is 640 / 40 = 16.
    assert summary["relative_flops"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "Bo128": 16.0, "SR α=0.5": 1.0}
    assert summary.loc["SR α=0.5", "flops_speedup_vs_largest_bon"] == 16.0
    assert summary.loc["Bo8", "flops_speedup_vs_largest_bon"] == 16.0
    # Two prompts: a resample is {p1, p1} (15 / 10 = 1.5), {p2, p2} (25 / 30 = 0.833) or one of
    # each (1.0), the first two a quarter of the resamples each, so the 95% interval is their span.
    assert (summary.loc["SR α=0.5", "relative_flops_lo"], summary.loc["SR α=0.5", "relative_flops_hi"]) == (
        pytest.approx(25 / 30), pytest.approx(1.5))
    # Bo32 has 4x Bo8's FLOPs on each prompt: 4 on every resample (paired).
    assert (summary.loc["Bo32", "relative_flops_lo"], summary.loc["Bo32", "relative_flops_hi"]) == (4.0, 4.0)
    # The wall-time statistics are untouched.
    assert summary["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "Bo128": 16.0, "SR α=0.5": 2.0}


def test_relative_flops_is_nan_without_counts():
    summary = by_label(method_summary(hand_runs(), n_resamples=50))  # no flops column: older runs
    assert summary["relative_flops"].isna().all() and summary["relative_flops_lo"].isna().all()
    # One uncounted prompt of SR: no partial sum passes for SR's FLOPs; the others keep theirs.
    runs = with_flops(hand_runs())
    runs.loc[(runs["method"] == "sr") & (runs["prompt_id"] == "p2"), "flops"] = math.nan
    summary = by_label(method_summary(runs, n_resamples=50))
    assert math.isnan(summary.loc["SR α=0.5", "relative_flops"])
    assert summary.loc["Bo32", "relative_flops"] == 4.0
    # Without Bo-N_min's counts there is nothing to be relative to.
    runs = with_flops(hand_runs())
    runs.loc[runs["method_label"] == "Bo8", "flops"] = math.nan
    assert method_summary(runs, n_resamples=0)["relative_flops"].isna().all()


# --- any method ------------------------------------------------------------------------------


def test_a_method_from_outside_the_project_is_summarised_and_located_like_sr():
    # "first-k" with a setting of its own: per prompt p1 2.0, p2 5.0, i.e. SR's scores, at 1 s.
    runs = hand_runs()
    other = runs[runs["method"] == "sr"].assign(method="first-k", setting='{"k":2,"n":3}',
                                                method_label="First 2 of 3", n=math.nan, time_s=1.0)
    other["score"] = other["prompt_id"].map({"p1": 2.0, "p2": 5.0})
    runs = pd.concat([runs, other], ignore_index=True)
    summary = method_summary(runs, n_resamples=200)
    # Best-of-N by N, then the other methods by name: "first-k" before "sr".
    assert summary["method_label"].tolist() == ["Bo8", "Bo32", "Bo128", "First 2 of 3", "SR α=0.5"]
    row = by_label(summary).loc["First 2 of 3"]
    # p1 100·(1 + 1/2) = 150, p2 100·(1 + 5/10) = 150; compute 2 s of Bo8's 2 s.
    assert (row["improvement"], row["relative_compute"], row["setting"]) == (150.0, 1.0, '{"k":2,"n":3}')
    located = bon_equivalent_compute(summary, draws=bootstrap_draws(runs, n_resamples=200)).set_index("method_label")
    assert located.index.tolist() == ["First 2 of 3", "SR α=0.5"]
    # 150 lies between Bo32 (4, 145) and Bo128 (16, 200): 4 · 4^(5/55) in log compute, speedup that / 1.
    expected = 4 * 4 ** (5 / 55)
    assert located.loc["First 2 of 3", "bon_equivalent_status"] == "interpolated"
    assert located.loc["First 2 of 3", "bon_equivalent_compute"] == pytest.approx(expected)
    assert located.loc["First 2 of 3", "compute_speedup"] == pytest.approx(expected)
    assert located.loc["First 2 of 3", "method"] == "first-k"
    assert located.loc["SR α=0.5", "compute_speedup"] == pytest.approx(4 * 4 ** (17.5 / 55) / 2)


def test_settings_are_ordered_by_their_labels_numbers_and_shared_labels_told_apart():
    runs = hand_runs()
    sr = runs[runs["method"] == "sr"]
    extra = [sr.assign(method="first-k", setting=f'{{"k":{k}}}', method_label=f"First {k}") for k in (10, 2)]
    # Two SR settings that differ only in a parameter the label does not show.
    extra.append(sr.assign(setting='{"alpha":0.5,"min_tokens":16}'))
    summary = method_summary(pd.concat([runs, *extra], ignore_index=True), n_resamples=0)
    # (equal labels: by setting text, where '{"alpha":0.5,"min_tokens":16}' sorts before '{"alpha":0.5}')
    assert summary["method_label"].tolist() == [
        "Bo8", "Bo32", "Bo128", "First 2", "First 10", "SR α=0.5 (min_tokens=16)", "SR α=0.5 (min_tokens=unset)"]
    with pytest.raises(ValueError, match="several method_label"):
        method_summary(pd.concat([runs, sr.assign(method_label="SR again", prompt_id=["p3", "p4"])]))
