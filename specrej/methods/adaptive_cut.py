"""Adaptive rejection (paper §6): which rows to halt at a decision token, chosen from
the partial scores themselves instead of one fixed α.

Model. For a generator/reward pair, at decision token τ, the final reward of a row continued to
completion is taken as linear in its partial reward with Gaussian residuals,

    final_i = a_p + b_τ · s_i + e_i,    e_i ~ N(0, σ_τ²) independent across rows,

where the level a_p depends on the prompt (reward levels differ by prompt) but the slope b_τ and the
residual spread σ_τ are shared, so they transfer from a prefix study to new prompts. Within one
prompt the level cancels from every comparison, so the rule needs only b_τ and σ_τ.

Rule (``adaptive_accepted``). With z the one-sided (1 - δ') normal quantile, accept row i iff its
optimistic projection reaches the best row's pessimistic one:

    b s_i + z σ >= b s_max - z σ    ⇔    s_i >= s_max - 2 z σ / b      (b > 0).

Torch-free: the engine and ``analysis`` both import it. numpy only; pandas is duck-typed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecrejError
from .cuts import accepted, rejection_cutoff

if TYPE_CHECKING:
    import pandas as pd

CORRECTIONS = ("none", "bonferroni")
# Fewer paired points than this leave no residual degrees of freedom worth the name.
MIN_POINTS = 3


@dataclass(frozen=True)
class PartialFit:
    """How final reward relates to partial reward at decision token `tau` for one generator/reward pair.

    slope, sigma: the within-prompt slope of final on partial reward and the residual standard
        deviation (prompt levels removed: see ``fit_from_prefix_table``). NaN when the data cannot
        say (too few points, constant partial scores); the rule then halts nothing.
    intercept: mean(final) - slope · mean(partial) over all prompts pooled, i.e. the level of the
        average prompt. It is informative only; within one prompt it cancels from the rule.
    n: points used (candidates x prompts at this tau); prompts: groups they came from.
    source: "fit" (a prefix study at this tau), "interpolated" (between studied taus) or "online"
        (a proxy from the prompt's own earlier rounds, ``online_fit``).
    """

    tau: int
    slope: float
    intercept: float
    sigma: float
    n: int
    prompts: int = 1
    source: str = "fit"

    @property
    def informative(self) -> bool:
        """True when the fit can rank rows: a finite positive slope and a finite sigma >= 0."""
        return (math.isfinite(self.slope) and self.slope > 0
                and math.isfinite(self.sigma) and self.sigma >= 0)


def _within_fit(partial: np.ndarray, final: np.ndarray, groups: np.ndarray) -> tuple[float, float, int, int]:
    """Fixed-effects (within) least squares: subtract each group's means, regress through the
    origin. Returns slope, sigma, points, groups; groups of one point carry no within information
    and are dropped. sigma uses n - groups - 1 degrees of freedom (one mean per group, one slope)."""
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    use = counts[inverse] >= 2
    partial, final = partial[use], final[use]
    _, inverse = np.unique(inverse[use], return_inverse=True)  # renumber the groups kept: 0..g-1
    n, n_groups = len(partial), int(inverse.max()) + 1 if len(inverse) else 0
    if n == 0:
        return math.nan, math.nan, 0, 0
    sizes = np.bincount(inverse).astype(float)
    x = partial - (np.bincount(inverse, partial) / sizes)[inverse]
    y = final - (np.bincount(inverse, final) / sizes)[inverse]
    sxx = float(x @ x)
    dof = n - n_groups - 1
    if n < MIN_POINTS or dof < 1 or not sxx > 0:
        return math.nan, math.nan, n, n_groups
    slope = float(x @ y) / sxx
    residual = y - slope * x
    return slope, math.sqrt(float(residual @ residual) / dof), n, n_groups


def fit_from_prefix_table(prefixes: pd.DataFrame, *, live_only: bool = True) -> dict[int, PartialFit]:
    """One ``PartialFit`` per tau of a prefix table (columns as in ``analysis.correlation``:
    prompt_id, tau, partial_score, final_score, finished_before_tau, ...).

    Prompts are pooled per tau with prompt-centred scores: each prompt's mean partial and mean
    final score at that tau are subtracted before the least-squares slope, because reward levels
    differ by prompt and a pooled fit on raw scores would mix the between-prompt relation into the
    slope and inflate sigma; the within-prompt slope and residual spread are what transfer.
    `live_only` drops rows that finished before tau: at a decision their final score is already
    known, so they say nothing about predicting a live row's final reward. Rows with a non-finite
    score are dropped.
    """
    fits: dict[int, PartialFit] = {}
    frame = prefixes
    if live_only and "finished_before_tau" in frame.columns:
        frame = frame[~frame["finished_before_tau"].astype(bool)]
    for tau, group in frame.groupby("tau", sort=True):
        partial = group["partial_score"].to_numpy(dtype=float)
        final = group["final_score"].to_numpy(dtype=float)
        ok = np.isfinite(partial) & np.isfinite(final)
        partial, final = partial[ok], final[ok]
        prompt_codes = group["prompt_id"].factorize()[0]  # ids of any type, no sorting of mixed types
        slope, sigma, n, n_groups = _within_fit(partial, final, prompt_codes[ok])
        intercept = float(final.mean() - slope * partial.mean()) if len(final) and math.isfinite(slope) else math.nan
        fits[int(tau)] = PartialFit(tau=int(tau), slope=slope, intercept=intercept, sigma=sigma, n=n,
                                    prompts=n_groups, source="fit")
    return fits


def interpolate_fit(fits: Mapping[int, PartialFit], tau: int) -> PartialFit:
    """The fit for a decision token `tau` from the studied ones: the fit itself if tau was studied;
    between two studied taus, slope, intercept and sigma linear in tau (n, prompts: the smaller of
    the two; source "interpolated"); outside the studied range, the nearest end, unchanged but for
    tau and source (no extrapolation: a line in tau would soon give a negative sigma). A NaN at
    either end makes the interpolated value NaN, i.e. uninformative."""
    if not fits:
        raise SpecrejError("no partial/final fits to interpolate from")
    if tau in fits:
        return fits[tau]
    taus = sorted(fits)
    if tau < taus[0] or tau > taus[-1]:
        end = fits[taus[0] if tau < taus[0] else taus[-1]]
        return PartialFit(**{**asdict(end), "tau": tau, "source": "interpolated"})
    hi = next(t for t in taus if t > tau)
    lo = taus[taus.index(hi) - 1]
    w = (tau - lo) / (hi - lo)
    a, b = fits[lo], fits[hi]

    def mix(u: float, v: float) -> float:
        return (1 - w) * u + w * v

    return PartialFit(tau=tau, slope=mix(a.slope, b.slope), intercept=mix(a.intercept, b.intercept),
                      sigma=mix(a.sigma, b.sigma), n=min(a.n, b.n), prompts=min(a.prompts, b.prompts),
                      source="interpolated")


def online_fit(previous: Sequence[float], current: Sequence[float], tau: int) -> PartialFit | None:
    """A proxy fit from one prompt's own past round, for a pair without a prefix study.

    `previous` and `current` are the partial scores of the same live rows (paired, in the same
    order) at the previous decision token and at `tau`; the current score stands in for the final
    one, since no final scores exist yet. OLS of current on previous gives slope and sigma.
    Selection by the earlier cut acts on the regressor only, so it does not bias the slope under
    the linear model. What it does not give: sigma measures the drift over one stretch of tokens,
    not all the way to the end of the response, so it usually understates the final-reward
    residual and makes the rule halt more than a study-based fit would; and it describes the
    previous tau, not this one. Returns None (use the fixed-α fallback) with fewer than
    ``MIN_POINTS`` finite pairs or constant earlier scores.
    """
    if len(previous) != len(current):
        raise ValueError(f"{len(previous)} previous scores for {len(current)} current ones")
    x, y = np.asarray(previous, dtype=float), np.asarray(current, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    slope, sigma, n, _ = _within_fit(x, y, np.zeros(len(x)))
    if not math.isfinite(slope):
        return None
    return PartialFit(tau=tau, slope=slope, intercept=float(y.mean() - slope * x.mean()), sigma=sigma, n=n,
                      prompts=1, source="online")


def check_delta(delta: float) -> None:
    """δ = 0 accepts every row (Best-of-N); δ = 0.5 gives z = 0 (accept only ties with the best);
    above 0.5 the margin turns negative and would halt the best row itself."""
    if not 0 <= delta <= 0.5:
        raise SpecrejError(f"delta must be in [0, 0.5], got {delta}")


def z_value(delta: float) -> float:
    """The one-sided (1 - delta) standard normal quantile; +inf at delta = 0."""
    return math.inf if delta == 0 else NormalDist().inv_cdf(1 - delta)


def adaptive_accepted(scores: Sequence[float], fit: PartialFit | None, delta: float, *,
                      correction: str = "bonferroni",
                      fallback_alpha: float | None = None) -> tuple[list[bool], dict]:
    """Which rows of one round go on, and the record of why.

    Accept row i iff ``s_i >= s_max - 2 z sigma / slope``, z the (1 - δ') normal quantile, δ' = δ
    with ``correction="none"`` and δ / (n - 1) with ``"bonferroni"`` (n rows, so n - 1 comparisons
    with the best). The best row and its ties always go on. A fit that cannot rank rows (slope
    <= 0 or not finite, sigma not finite) accepts every row. With no fit (``fit=None``) the round
    falls back to the fixed-α cut of eq. 4-5 with `fallback_alpha`, and the record says so.
    δ = 0 accepts every row (Best-of-N), even with sigma = 0. Non-finite scores count as -inf, as
    in the engine (a NaN or +inf score is a broken reward, not a winner).

    What is guaranteed, and only under the model of this module (final reward linear in partial
    reward with independent Gaussian residuals of spread sigma, the fitted slope and sigma taken as
    exact): for each halted row i, the chance that its final reward would exceed that of the row
    now scoring best is at most 1 - Φ(√2 z) <= δ' (the difference of two residuals has spread
    σ√2, so the interval-overlap test above is conservative). That is a per-pair bound. With
    ``"bonferroni"``, a union bound over the n - 1 comparisons makes δ bound the chance that this
    round halts the row that would have ended best among its n rows. What is not guaranteed: a
    family-wise bound over several rounds (the per-round δ add up, at most rounds · δ), anything
    when the model is wrong (heavy tails, rows whose spread differs, a fit from another pair or a
    poorly estimated one: the error in slope and sigma is ignored), and, with ``"none"``, any bound
    on the best row, since up to n - 1 comparisons each get δ. An ``online`` fit inherits the
    biases stated in ``online_fit``.

    Record keys: rule, delta, correction, comparisons, source ("fit", "interpolated", "online" or
    "fixed_alpha_fallback"), tau, slope, sigma, z, s_max, cutoff, informative; the fallback adds alpha.
    """
    if not scores:
        raise ValueError("no scores to cut")
    check_delta(delta)
    if correction not in CORRECTIONS:
        raise SpecrejError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    s = [x if math.isfinite(x) else -math.inf for x in map(float, scores)]
    comparisons = max(1, len(s) - 1) if correction == "bonferroni" else 1
    record = {"rule": "adaptive", "delta": delta, "correction": correction, "comparisons": comparisons}
    if fit is None:
        if fallback_alpha is None:
            raise SpecrejError("adaptive rejection has no partial/final fit for this pair and no fallback alpha")
        cutoff = rejection_cutoff(s, fallback_alpha)
        record.update(source="fixed_alpha_fallback", alpha=fallback_alpha, tau=None, slope=math.nan,
                      sigma=math.nan, z=math.nan, s_max=max(s), cutoff=cutoff, informative=False)
        return accepted(s, fallback_alpha), record
    z = z_value(delta / comparisons)
    s_max = max(s)
    informative = fit.informative
    if not informative or math.isinf(s_max) or math.isinf(z):
        cutoff = -math.inf  # no information, no finite score, or delta = 0 (Best-of-N): halt nothing
    else:
        cutoff = s_max - 2 * z * fit.sigma / fit.slope
    record.update(source=fit.source, tau=fit.tau, slope=fit.slope, sigma=fit.sigma, z=z, s_max=s_max,
                  cutoff=cutoff, informative=informative)
    return [x >= cutoff for x in s], record


class AdaptiveCut:
    """`adaptive_accepted` as the engine's rejection rule (`cuts.Cut`).

    With `fits` (per decision token, e.g. ``fit_from_prefix_table`` of the pair's correlation
    study) each round uses the fit at its token (``interpolate_fit``). Without, it estimates one
    online from the prompt's own previous round (``online_fit``; the first round has none and
    falls back to the fixed-α cut with `fallback_alpha`). Each round's record says which.
    """

    def __init__(self, delta: float, fits: Mapping[int, PartialFit] | None = None, *,
                 fallback_alpha: float = 0.5, correction: str = "bonferroni"):
        check_delta(delta)
        self.delta, self.fits, self.fallback_alpha, self.correction = delta, dict(fits or {}), fallback_alpha, correction
        self.previous: dict = {}  # candidate id -> score at the previous round, for the online fit

    def __call__(self, ids: Sequence, scores: Sequence[float], tau: int) -> tuple[list[bool], dict]:
        if self.fits:
            fit = interpolate_fit(self.fits, tau)
        else:
            pairs = [(self.previous[i], s) for i, s in zip(ids, scores) if i in self.previous]
            fit = online_fit([p for p, _ in pairs], [c for _, c in pairs], tau) if pairs else None
        accept, record = adaptive_accepted(scores, fit, self.delta, correction=self.correction,
                                           fallback_alpha=self.fallback_alpha)
        self.previous = dict(zip(ids, scores))
        return accept, record

    def priority(self, ids: Sequence, scores: Sequence[float]) -> list[float]:
        return list(scores)

    def describe(self) -> dict:
        return {"rule": "adaptive", "delta": self.delta, "correction": self.correction,
                "fit": "study" if self.fits else "online", "fallback_alpha": self.fallback_alpha}

