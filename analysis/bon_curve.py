"""Where a configuration falls on the Best-of-N curve (paper §5, Figure 3): the Best-of-N compute
that reaches its improvement score, interpolated in log compute between the measured Best-of-N
points (``interpolate_log_compute``, ``locate_on_curves``), and the BoN-equivalent compute and
speedup at equal score of every non-BoN configuration, with intervals over the paired bootstrap
resamples of ``analysis.metrics.bootstrap_draws`` (``bon_equivalent_compute``).
"""

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from analysis._columns import require_columns, rows_where
from analysis.bootstrap import DEFAULT_CONFIDENCE, percentile_interval
from analysis.settings import with_display


class Location(NamedTuple):
    """Where a score falls on a BoN (compute, score) curve; see ``interpolate_log_compute``."""

    compute: float
    status: str
    extrapolated: float


def interpolate_log_compute(compute: Sequence[float], score: Sequence[float], target: float) -> Location:
    """Compute at which a BoN (compute, score) curve reaches ``target``, linear in log(compute).

    BoN's score grows roughly linearly in log N, so interpolating in log-compute is the
    natural reading of Figure 3's log-scaled axis.  The points are walked in order of
    increasing compute; the first point whose score reaches ``target`` and the point before
    it bound the interpolation (the official code's ``compute_speedups`` rule; an exact hit
    returns that point's compute).  Status:

    - "interpolated": ``compute`` is the answer;
    - "below_range": ``target`` is below the cheapest point's score (Bo-N_min), even if a
      later point of a non-monotone curve dips lower;
    - "above_range": no point reaches ``target``;
    - "no_curve" (no finite point) / "no_score" (``target`` not finite).

    Outside the range ``compute`` is NaN and ``extrapolated`` continues the line through the
    first two (below) or last two (above) points — NaN when that line does not rise, as
    extrapolating best-of-N is guesswork to be reported as such, never as a measurement.
    """
    x, y = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
    usable = np.isfinite(x) & (x > 0) & np.isfinite(y)
    found = locate_on_curves(x[usable][:, None], y[usable][:, None], np.array([target], dtype=float))
    return Location(float(found[0][0]), str(found[1][0]), float(found[2][0]))


def locate_on_curves(
    compute: np.ndarray, score: np.ndarray, target: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``interpolate_log_compute`` for R curves at once: (K, R) points, (R,) targets.

    Returns (compute, status, extrapolated), each of shape (R,).  A curve with any
    non-finite or non-positive point is "no_curve"; the bootstrap locates a method on every
    resample's BoN curve with this.
    """
    compute, score = np.asarray(compute, dtype=float), np.asarray(score, dtype=float)
    target = np.asarray(target, dtype=float)
    n_points, n_curves = score.shape
    if n_points == 0:
        nan = np.full(n_curves, math.nan)
        return nan, np.where(np.isfinite(target), "no_curve", "no_score"), nan.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        log_x = np.log(compute)
    curve_ok = (np.isfinite(log_x) & np.isfinite(score)).all(axis=0)
    order = np.argsort(log_x, axis=0)
    log_x, y = np.take_along_axis(log_x, order, 0), np.take_along_axis(score, order, 0)

    reached = y >= target
    first = reached.argmax(axis=0)  # first point reaching the target (0 when none does)
    before = np.maximum(first - 1, 0)
    curves = np.arange(n_curves)
    y_hi, y_lo, x_hi, x_lo = y[first, curves], y[before, curves], log_x[first, curves], log_x[before, curves]
    # first == 0 and in range means an exact hit of the cheapest point: weight 1 keeps it.
    weight = np.divide(target - y_lo, y_hi - y_lo, out=np.ones(n_curves), where=first > 0)
    status = np.select(
        [~np.isfinite(target), ~curve_ok, target < y[0], ~reached.any(axis=0)],
        ["no_score", "no_curve", "below_range", "above_range"],
        "interpolated",
    )
    with np.errstate(over="ignore", invalid="ignore"):
        located = np.where(status == "interpolated", np.exp(x_lo + weight * (x_hi - x_lo)), math.nan)
        extrapolated = np.full(n_curves, math.nan)
        if n_points >= 2:
            below = _extrapolate(log_x[0], y[0], log_x[1], y[1], target)
            above = _extrapolate(log_x[-2], y[-2], log_x[-1], y[-1], target)
            ends = [status == "below_range", status == "above_range"]
            extrapolated = np.exp(np.select(ends, [below, above], math.nan))
    return located, status, extrapolated


def bon_equivalent_compute(
    summary: pd.DataFrame,
    by: Sequence[str] = (),
    draws: pd.DataFrame | None = None,
    confidence_level: float = DEFAULT_CONFIDENCE,
) -> pd.DataFrame:
    """The BoN compute that would reach each non-BoN configuration's improvement score.

    Input: ``method_summary`` output and, for intervals, ``bootstrap_draws`` of the same runs.
    Within each ``by`` group the BoN points (relative compute, improvement) form a curve on
    which every other configuration — of every method — is located by
    ``interpolate_log_compute``.  Output: the summary's non-BoN rows (all its columns) with

    - bon_equivalent_compute, bon_equivalent_status, bon_equivalent_compute_extrapolated;
    - compute_speedup = bon_equivalent_compute / relative_compute (NaN outside the range)
      and compute_speedup_extrapolated, its out-of-range counterpart;
    - bon_equivalent_compute_lo/hi and compute_speedup_lo/hi: percentile interval over every
      resample. A resample in which the point lands above that resample's BoN curve is *censored*
      at the largest BoN's compute (BoN needs at least that much), one below it at Bo-N_min's, so
      the interval never drops the resamples most favourable (or least) to the method: a censored
      lower limit is conservative; when more than the interval's tail of resamples are censored
      above (below), the upper (lower) limit is only a bound, flagged by
      compute_speedup_hi_is_bound (compute_speedup_lo_is_bound) — read it as "≥ hi" ("≤ lo");
    - bon_equivalent_in_range_frac, bon_equivalent_above_frac, bon_equivalent_below_frac: the
      shares of resamples inside, above and below the curve (NaN without draws);
    - the same speedup on the FLOPs axis (any machine's, where compute is this machine's seconds),
      located on the Best-of-N curve of relative FLOPs: bon_equivalent_flops, flops_speedup,
      flops_speedup_extrapolated, flops_speedup_lo/hi and their _is_bound flags (NaN where the
      summary has no ``relative_flops``).
    """
    require_columns(summary, [*by, "method", "setting", "method_label", "n", "relative_compute", "improvement"],
                    "method summary")
    if draws is None:
        draws = pd.DataFrame(columns=[*by, "method", "method_label", "resample", "relative_compute", "improvement"])
    require_columns(draws, [*by, "method", "method_label", "resample", "relative_compute", "improvement"],
                    "bootstrap draws")
    if not by:
        return _with_flop_speedup(summary, draws, confidence_level)
    parts = []
    for keys, group in summary.groupby(list(by), sort=False):
        in_group = dict(zip(by, keys, strict=True))
        part = _with_flop_speedup(group.drop(columns=list(by)), rows_where(draws, in_group), confidence_level)
        for position, (column, key) in enumerate(in_group.items()):
            part.insert(position, column, key)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


# the columns of the compute axis that the FLOPs axis gives too, and their FLOPs names
FLOP_AXIS = {"bon_equivalent_compute": "bon_equivalent_flops", "compute_speedup": "flops_speedup",
             "compute_speedup_extrapolated": "flops_speedup_extrapolated", "compute_speedup_lo": "flops_speedup_lo",
             "compute_speedup_hi": "flops_speedup_hi", "compute_speedup_lo_is_bound": "flops_speedup_lo_is_bound",
             "compute_speedup_hi_is_bound": "flops_speedup_hi_is_bound"}


def _with_flop_speedup(summary: pd.DataFrame, draws: pd.DataFrame, confidence_level: float) -> pd.DataFrame:
    """`_locate_on_bon_curve` on the compute axis, with the FLOPs axis's columns (`FLOP_AXIS`) beside."""
    points = _locate_on_bon_curve(summary, draws, confidence_level)
    if "relative_flops" not in summary:
        return points.assign(**{name: math.nan for name in FLOP_AXIS.values()})
    on_flops = _locate_on_bon_curve(
        summary.assign(relative_compute=summary["relative_flops"]),
        draws.assign(relative_compute=draws["relative_flops"] if "relative_flops" in draws else math.nan),
        confidence_level)
    return points.assign(**{name: on_flops[column].to_numpy() for column, name in FLOP_AXIS.items()})


def _locate_on_bon_curve(summary: pd.DataFrame, draws: pd.DataFrame, confidence_level: float) -> pd.DataFrame:
    summary = with_display(summary)
    bon = summary[summary["reference"]]
    points = summary[~summary["reference"]].reset_index(drop=True)  # every other method's configurations
    located = [interpolate_log_compute(bon["relative_compute"], bon["improvement"], t) for t in points["improvement"]]
    points["bon_equivalent_compute"] = [where.compute for where in located]
    points["bon_equivalent_status"] = [where.status for where in located]
    points["bon_equivalent_compute_extrapolated"] = [where.extrapolated for where in located]
    points["compute_speedup"] = points["bon_equivalent_compute"] / points["relative_compute"]
    points["compute_speedup_extrapolated"] = points["bon_equivalent_compute_extrapolated"] / points["relative_compute"]
    interval_columns = ["bon_equivalent_compute_lo", "bon_equivalent_compute_hi", "compute_speedup_lo",
                        "compute_speedup_hi", "bon_equivalent_in_range_frac", "bon_equivalent_above_frac",
                        "bon_equivalent_below_frac", "compute_speedup_lo_is_bound", "compute_speedup_hi_is_bound"]
    for column in interval_columns:
        points[column] = False if column.endswith("_is_bound") else math.nan
    if draws.empty or points.empty:
        return points

    def by_resample(rows: pd.DataFrame, column: str) -> np.ndarray:
        return rows.pivot(index="method_label", columns="resample", values=column).to_numpy(dtype=float)

    bon_draws = draws[draws["method"].isin(set(bon["method"]))]
    curve_x, curve_y = by_resample(bon_draws, "relative_compute"), by_resample(bon_draws, "improvement")
    tail = (1.0 - confidence_level) / 2.0
    for row, label in enumerate(points["method_label"]):
        mine = draws[draws["method_label"] == label].sort_values("resample")
        compute, status, _ = locate_on_curves(curve_x, curve_y, mine["improvement"].to_numpy(dtype=float))
        above, below = status == "above_range", status == "below_range"
        censored = np.select([above, below], [curve_x.max(axis=0), curve_x.min(axis=0)], compute)
        speedup = censored / mine["relative_compute"].to_numpy(dtype=float)
        (low, high), = percentile_interval(censored, confidence_level)
        (speed_low, speed_high), = percentile_interval(speedup, confidence_level)
        points.loc[row, interval_columns[:-2]] = [low, high, speed_low, speed_high,
                                                  (status == "interpolated").mean(), above.mean(), below.mean()]
        points.loc[row, interval_columns[-2:]] = [bool(below.mean() > tail), bool(above.mean() > tail)]
    return points


def _extrapolate(x_a: np.ndarray, y_a: np.ndarray, x_b: np.ndarray, y_b: np.ndarray, target: np.ndarray) -> np.ndarray:
    """log-compute where the line through (x_a, y_a), (x_b, y_b) reaches ``target``; NaN unless it rises."""
    rises = y_b > y_a
    return np.where(rises, x_a + (target - y_a) * (x_b - x_a) / np.where(rises, y_b - y_a, 1.0), math.nan)
