"""Adaptive rejection (issue 14) on synthetic rewards where the right answer is known."""

import math

import numpy as np
import pandas as pd
import pytest

from specrej.errors import SpecrejError
from specrej.methods.adaptive_cut import (
    PartialFit,
    adaptive_accepted,
    fit_from_prefix_table,
    interpolate_fit,
    online_fit,
    z_value,
)
from specrej.methods.cuts import accepted


def prefix_table(final_of, *, prompts=8, candidates=40, taus=(16, 64), seed=0, prompt_level=None):
    """A synthetic prefix table: partial ~ N(level_p, 1) per (prompt, candidate, tau), and
    final = final_of(partial, prompt index, rng)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(prompts):
        level = 0.0 if prompt_level is None else prompt_level(p)
        for tau in taus:
            partial = level + rng.standard_normal(candidates)
            final = final_of(partial, p, rng)
            rows += [{"prompt_id": f"p{p}", "candidate_id": c, "tau": tau, "partial_score": float(partial[c]),
                      "final_score": float(final[c]), "num_tokens": 200, "finished_before_tau": False}
                     for c in range(candidates)]
    return pd.DataFrame(rows)


def test_perfect_correlation_keeps_only_the_rows_that_can_still_win():
    # final = 2 * partial + a prompt offset, no noise: the fit says slope 2, sigma 0, and only
    # the rows tied with the best partial score can end best.
    fits = fit_from_prefix_table(prefix_table(lambda x, p, rng: 2 * x + 10 * p))
    assert set(fits) == {16, 64}
    fit = fits[64]
    assert fit.slope == pytest.approx(2.0) and fit.sigma == pytest.approx(0.0, abs=1e-9)
    scores = [1.0, 3.0, 3.0, 2.999, 0.5]
    keep, record = adaptive_accepted(scores, fit, 0.05)
    assert keep == [False, True, True, False, False]
    assert record["source"] == "fit" and record["s_max"] == 3.0 and record["cutoff"] > 2.999
    # an exact sigma = 0 gives the cutoff s_max itself
    exact = PartialFit(tau=64, slope=2.0, intercept=0.0, sigma=0.0, n=100)
    assert adaptive_accepted(scores, exact, 0.05)[0] == [False, True, True, False, False]
    assert adaptive_accepted(scores, exact, 0.05)[1]["cutoff"] == 3.0


def test_independent_scores_halt_nothing():
    fits = fit_from_prefix_table(prefix_table(lambda x, p, rng: 5 * p + rng.standard_normal(len(x)), prompts=20))
    rng = np.random.default_rng(1)
    for fit in fits.values():
        assert abs(fit.slope) < 0.1 and fit.sigma == pytest.approx(1.0, abs=0.1)
        scores = list(rng.standard_normal(100))
        for correction in ("none", "bonferroni"):
            keep, record = adaptive_accepted(scores, fit, 0.05, correction=correction)
            assert all(keep), record
    # no information at all: slope <= 0 or sigma unknown keeps every row
    for slope, sigma in [(-0.3, 1.0), (0.0, 1.0), (1.0, math.nan), (math.nan, 1.0)]:
        fit = PartialFit(tau=8, slope=slope, intercept=0.0, sigma=sigma, n=50)
        keep, record = adaptive_accepted([0.0, 5.0, -3.0], fit, 0.2)
        assert keep == [True] * 3 and record["informative"] is False and record["cutoff"] == -math.inf


def test_delta_to_zero_is_best_of_n_and_larger_delta_keeps_fewer():
    fit = PartialFit(tau=32, slope=1.0, intercept=0.0, sigma=0.5, n=500)
    scores = list(np.linspace(0.0, 5.0, 21))
    deltas = [0.0, 1e-12, 1e-6, 1e-3, 0.01, 0.05, 0.1, 0.3, 0.5]
    for correction in ("none", "bonferroni"):
        masks = [adaptive_accepted(scores, fit, d, correction=correction)[0] for d in deltas]
        kept = [sum(m) for m in masks]
        assert kept[0] == kept[1] == len(scores)  # delta = 0 (and ~0) keeps every row: Best-of-N
        assert kept[-1] < len(scores)
        assert kept == sorted(kept, reverse=True)  # monotone in delta
        for looser, tighter in zip(masks, masks[1:]):  # and nested: a larger delta only halts more
            assert all(a or not b for a, b in zip(looser, tighter))
        assert all(m[-1] for m in masks)  # the best row always goes on
    # delta = 0 is Best-of-N even when the fit says the partial score is the final one
    assert all(adaptive_accepted(scores, PartialFit(32, 1.0, 0.0, 0.0, 10), 0.0)[0])


def test_hand_worked_cutoff():
    fit = PartialFit(tau=32, slope=1.0, intercept=0.0, sigma=0.5, n=500)
    scores = [3.0, 2.0, 1.36, 1.35, 1.3]
    # z_{0.95} = 1.6449 (normal table); cutoff = 3 - 2 * 1.6449 * 0.5 / 1 = 1.3551
    keep, record = adaptive_accepted(scores, fit, 0.05, correction="none")
    assert record["z"] == pytest.approx(1.6449, abs=1e-4)
    assert record["cutoff"] == pytest.approx(3.0 - 1.6449, abs=1e-4)
    assert keep == [True, True, True, False, False]
    assert record["rule"] == "adaptive" and record["delta"] == 0.05 and record["slope"] == 1.0
    assert record["sigma"] == 0.5 and record["comparisons"] == 1
    # slope 2 halves the margin: cutoff = 3 - 0.8225 = 2.1776
    keep, record = adaptive_accepted(scores, PartialFit(32, 2.0, 0.0, 0.5, 500), 0.05, correction="none")
    assert record["cutoff"] == pytest.approx(3.0 - 1.6449 / 2, abs=1e-4) and keep == [True, False, False, False, False]
    # Bonferroni over 4 comparisons: z_{1 - 0.05/4} = z_{0.9875} = 2.2414; cutoff = 3 - 2.2414
    keep, record = adaptive_accepted(scores, fit, 0.05)
    assert record["comparisons"] == 4 and record["z"] == pytest.approx(2.2414, abs=1e-4)
    assert record["cutoff"] == pytest.approx(3.0 - 2.2414, abs=1e-4) and keep == [True] * 5
    assert z_value(0.05) == pytest.approx(1.6449, abs=1e-4) and z_value(0.0) == math.inf


def test_fit_recovers_slope_and_sigma_despite_prompt_offsets():
    # Prompts with higher partial levels have much lower final levels: a pooled fit on raw
    # scores finds a negative slope; the prompt-centred fit finds the within-prompt one.
    slope, sigma = 1.5, 0.8
    table = prefix_table(lambda x, p, rng: -6.0 * p + slope * x + sigma * rng.standard_normal(len(x)),
                         prompts=12, candidates=60, prompt_level=lambda p: 2.0 * p, seed=3)
    raw_slope = np.polyfit(table["partial_score"], table["final_score"], 1)[0]
    assert raw_slope < 0  # what centring protects against
    fits = fit_from_prefix_table(table)
    for fit in fits.values():
        assert fit.slope == pytest.approx(slope, abs=0.1) and fit.sigma == pytest.approx(sigma, abs=0.08)
        assert fit.n == 12 * 60 and fit.prompts == 12 and fit.source == "fit"
    # rows finished before tau are left out by default (their final score is already known)
    table.loc[table.index[:30], "finished_before_tau"] = True
    assert fit_from_prefix_table(table)[16].n == 12 * 60 - 30
    assert fit_from_prefix_table(table, live_only=False)[16].n == 12 * 60
    # too little within-prompt data: NaN, i.e. uninformative (one candidate per prompt)
    tiny = fit_from_prefix_table(prefix_table(lambda x, p, rng: x, prompts=5, candidates=1))
    assert all(math.isnan(f.slope) and not f.informative for f in tiny.values())


def test_interpolation_is_linear_in_tau_and_clamped_outside():
    fits = {16: PartialFit(16, 1.0, 0.0, 1.0, 100, 5), 64: PartialFit(64, 2.0, 1.0, 0.5, 80, 4)}
    mid = interpolate_fit(fits, 28)  # a quarter of the way from 16 to 64
    assert (mid.slope, mid.intercept, mid.sigma, mid.n, mid.prompts) == pytest.approx((1.25, 0.25, 0.875, 80, 4))
    assert mid.tau == 28 and mid.source == "interpolated"
    assert interpolate_fit(fits, 64) is fits[64]
    low, high = interpolate_fit(fits, 4), interpolate_fit(fits, 500)
    assert (low.slope, low.sigma, low.tau) == (1.0, 1.0, 4) and (high.slope, high.sigma, high.tau) == (2.0, 0.5, 500)
    with pytest.raises(SpecrejError):
        interpolate_fit({}, 10)


def test_without_a_fit_falls_back_to_fixed_alpha_and_says_so():
    scores = [1.0, 3.0, 2.0, 2.0, 0.5]
    keep, record = adaptive_accepted(scores, None, 0.05, fallback_alpha=0.5)
    assert keep == accepted(scores, 0.5) and record["source"] == "fixed_alpha_fallback"
    assert record["alpha"] == 0.5 and record["cutoff"] == 2.0
    with pytest.raises(SpecrejError):
        adaptive_accepted(scores, None, 0.05)


def test_online_fit_from_the_prompts_own_rounds():
    rng = np.random.default_rng(7)
    previous = rng.standard_normal(200)
    current = 0.9 * previous + 0.3 * rng.standard_normal(200)
    fit = online_fit(list(previous), list(current), tau=48)
    assert fit.source == "online" and fit.tau == 48
    assert fit.slope == pytest.approx(0.9, abs=0.05) and fit.sigma == pytest.approx(0.3, abs=0.04)
    keep, record = adaptive_accepted(list(current), fit, 0.05)
    assert record["source"] == "online" and 0 < sum(keep) < len(keep)
    assert online_fit([1.0, 2.0], [1.0, 2.0], tau=8) is None  # too few pairs
    assert online_fit([1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 2.0, 3.0], tau=8) is None  # constant earlier scores
    with pytest.raises(ValueError):
        online_fit([1.0], [1.0, 2.0], tau=8)


def test_bad_input_and_non_finite_scores():
    fit = PartialFit(tau=8, slope=1.0, intercept=0.0, sigma=0.1, n=50)
    for delta in (-0.1, 0.6, 1.0):
        with pytest.raises(SpecrejError):
            adaptive_accepted([1.0], fit, delta)
    with pytest.raises(SpecrejError):
        adaptive_accepted([1.0], fit, 0.05, correction="holm")
    with pytest.raises(ValueError):
        adaptive_accepted([], fit, 0.05)
    # NaN and +inf count as -inf (a broken reward), as in the engine; all -inf keeps all
    assert adaptive_accepted([float("nan"), 1.0, float("inf"), float("-inf")], fit, 0.05)[0] == [False, True, False,
                                                                                               False]
    assert adaptive_accepted([float("-inf")] * 3, fit, 0.05)[0] == [True] * 3
    assert adaptive_accepted([2.0], fit, 0.5)[0] == [True]  # one row, z = 0: it goes on
