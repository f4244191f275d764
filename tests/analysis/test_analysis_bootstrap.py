"""analysis.bootstrap: the one prompt bootstrap, checked against scipy.stats.bootstrap itself."""

import math

import numpy as np
import pytest
from scipy import stats

from analysis.bootstrap import bootstrap_weights, mean_interval, percentile_interval


def test_weights_count_each_prompt_of_each_resample_and_repeat_with_the_seed():
    weights = bootstrap_weights(7, 500, seed=3)
    assert weights.shape == (500, 7) and (weights.sum(axis=1) == 7).all()
    assert weights.mean() == pytest.approx(1.0, abs=0.05)  # each prompt 7 × 1/7 times per resample on average
    np.testing.assert_array_equal(weights, bootstrap_weights(7, 500, seed=3))
    assert not np.array_equal(weights, bootstrap_weights(7, 500, seed=4))


def test_weights_are_scipys_resamples():
    values = np.array([0.3, 1.7, -2.0, 5.5, 0.0, 9.25])
    ours = bootstrap_weights(len(values), 300, seed=11) @ values / len(values)
    theirs = stats.bootstrap((values,), np.mean, n_resamples=300, method="percentile",
                             rng=np.random.default_rng(11)).bootstrap_distribution
    np.testing.assert_allclose(ours, theirs)


def test_mean_interval_is_scipys_percentile_interval():
    values = np.array([0.3, 1.7, -2.0, 5.5, 0.0, 9.25, 4.0])
    result = stats.bootstrap((values,), np.mean, n_resamples=400, confidence_level=0.9, method="percentile",
                             rng=np.random.default_rng(5))
    low, high = mean_interval(values, 400, 0.9, seed=5)
    assert (low, high) == pytest.approx((result.confidence_interval.low, result.confidence_interval.high))
    assert all(math.isnan(v) for v in mean_interval(np.array([1.0]), 400, 0.9))  # one value: no spread


def test_one_prompt_is_its_own_resample_and_none_gives_none():
    np.testing.assert_array_equal(bootstrap_weights(1, 4), np.ones((4, 1)))
    assert bootstrap_weights(5, 0).shape == (0, 5)


def test_percentile_interval_ignores_nan_and_handles_empty_rows():
    intervals = percentile_interval(np.array([[1.0, 2.0, 3.0, np.nan], [np.nan] * 4]), 0.5)
    assert intervals[0].tolist() == [1.5, 2.5]
    assert np.isnan(intervals[1]).all()
