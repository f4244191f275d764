"""The one prompt-level bootstrap of the analysis: every interval in ``analysis`` comes from
``bootstrap_weights`` and ``percentile_interval``.

The resamples are ``scipy.stats.bootstrap``'s own (paired, seeded with ``seed``), taken as
counts: how often each prompt appears in each resample.  A statistic of a resample is then a
weighted sum over the original prompts (a matrix product), so one matrix serves every
configuration and every statistic of a group, which makes differences and ratios between them
paired.  Intervals are percentiles of the resampled statistic over its finite values.
"""

import math

import numpy as np
from scipy import stats

DEFAULT_RESAMPLES, DEFAULT_CONFIDENCE = 1000, 0.95


def bootstrap_weights(n_prompts: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n_prompts) counts: how often each prompt appears in each resample of
    ``scipy.stats.bootstrap`` (drawn with ``numpy.random.default_rng(seed)``).  One prompt has one
    resample, itself."""
    if n_resamples == 0 or n_prompts == 0:
        return np.zeros((n_resamples, n_prompts), dtype=int)
    if n_prompts == 1:
        return np.ones((n_resamples, 1), dtype=int)

    def counts(indices: np.ndarray, axis: int = -1) -> np.ndarray:  # (batch, P) drawn indices -> (P, batch)
        indices = np.moveaxis(indices, axis, -1).astype(int)
        batch = indices.shape[0]
        offsets = (indices + n_prompts * np.arange(batch)[:, None]).ravel()
        return np.bincount(offsets, minlength=batch * n_prompts).reshape(batch, n_prompts).T.astype(float)

    result = stats.bootstrap((np.arange(n_prompts),), counts, n_resamples=n_resamples, vectorized=True,
                             method="percentile", rng=np.random.default_rng(seed))
    return result.bootstrap_distribution.T.round().astype(int)


def percentile_interval(draws: np.ndarray, confidence_level: float = DEFAULT_CONFIDENCE) -> np.ndarray:
    """(rows, 2) percentile interval of each row of ``draws``, ignoring non-finite draws.

    A row without finite draws gets (NaN, NaN) rather than a warning.
    """
    draws = np.atleast_2d(np.asarray(draws, dtype=float))
    tail = 100.0 * (1.0 - confidence_level) / 2.0
    intervals = np.full((len(draws), 2), math.nan)
    for row, values in enumerate(draws):
        finite = values[np.isfinite(values)]
        if finite.size:
            intervals[row] = np.percentile(finite, [tail, 100.0 - tail])
    return intervals


def mean_interval(values: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES,
                  confidence_level: float = DEFAULT_CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` (one per prompt); NaN below two values, where
    a bootstrap has no spread to report."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2 or n_resamples == 0:
        return math.nan, math.nan
    means = bootstrap_weights(len(values), n_resamples, seed) @ values / len(values)
    (low, high), = percentile_interval(means, confidence_level)
    return float(low), float(high)
