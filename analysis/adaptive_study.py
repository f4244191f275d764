"""Adaptive rejection (paper §6, ``specrej.methods.adaptive_cut``) measured against fixed α.

Two questions, each a pure function:

- ``survival_at_equal_tokens``: on a prefix table (the correlation study's responses), how often
  does the adaptive rule at a decision token keep the response that ends best, against the fixed
  α cut that keeps as many rows on average (so both spend the same tokens after that decision)?
- ``against_fixed_alpha``: on Figure 3's points, where does each adaptive SR run lie relative to
  the fixed-α SR curve at its own compute (above it is better), with the prompt bootstrap's
  paired resamples (``analysis.metrics.bootstrap_draws``)?

``fits_table`` lists the partial/final fits the rule used. The rule is the engine's own
(``specrej.methods.adaptive_cut.adaptive_accepted``, ``specrej.methods.cuts.accepted``), torch-free.

This is SR's own study, so unlike the rest of ``analysis`` it knows SR's methods and parameters:
the fixed-α curve is SR's method, the adaptive points those of SR with the adaptive cut, and an adaptive
point's δ is read from its setting (``sr_param``).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np
import pandas as pd

from analysis._columns import require_columns, rows_where
from analysis.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_weights, percentile_interval
from analysis.settings import setting_params
from specrej.methods.adaptive_cut import PartialFit, adaptive_accepted, interpolate_fit
from specrej.methods.cuts import accepted
from specrej.methods.sr import SPECULATIVE_REJECTION
from specrej.methods.sr_adaptive import ADAPTIVE as ADAPTIVE_SR

SURVIVAL_COLUMNS = ("prompt_id", "tau", "partial_score", "final_score")
POINT_COLUMNS = ("method", "setting", "method_label", "relative_compute", "improvement")
FIXED_ALPHA, ADAPTIVE = SPECULATIVE_REJECTION.name, ADAPTIVE_SR.name  # the methods compared


def sr_param(setting: str, name: str) -> float:
    """One of SR's parameters (e.g. "alpha", "delta") from a configuration's ``setting`` text;
    NaN when the setting does not hold it."""
    value = setting_params(setting).get(name)
    return float(value) if value is not None else math.nan


def fits_table(fits: Mapping[int, PartialFit]) -> pd.DataFrame:
    """One row per decision token: tau, slope, intercept, sigma, n, prompts, source, and
    margin_per_z = 2 sigma / slope (the rule halts rows more than z times this below the best)."""
    table = pd.DataFrame([asdict(fits[tau]) for tau in sorted(fits)],
                         columns=["tau", "slope", "intercept", "sigma", "n", "prompts", "source"])
    with np.errstate(divide="ignore", invalid="ignore"):
        table["margin_per_z"] = 2 * table["sigma"] / table["slope"].where(table["slope"] > 0)
    return table


def survival_at_equal_tokens(
    prefixes: pd.DataFrame,
    fits: Mapping[int, PartialFit],
    deltas: Sequence[float],
    correction: str = "bonferroni",
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> pd.DataFrame:
    """Best-response survival of the adaptive rule and of fixed α at equal tokens, per (tau, δ).

    For each prompt at decision token tau, the adaptive rule (fit ``interpolate_fit(fits, tau)``,
    ``correction`` over the prompt's n rows) keeps a share k_p of the rows. The fixed α with the
    same mean share, α = 1 − mean_p k_p, keeps as many rows on average, so after tau both spend
    the same tokens in expectation; it is applied to every prompt (eq. 4-5, ties kept). A rule
    "keeps the best" on a prompt when a row with the prompt's highest final score is kept, as
    ``analysis.correlation.best_survives``. Rows with a non-finite final score are dropped (who
    ended best is unknown for them); a non-finite partial score counts as −inf in both rules.

    Output, one row per (tau, delta): tau, delta, n_prompts, rows (mean rows per prompt),
    fit_source, adaptive_kept_frac (mean k_p), adaptive_kept_frac_min/max (over prompts),
    equal_alpha, fixed_kept_frac (realised, ties included), adaptive_best_survives and
    fixed_best_survives (shares of prompts), survives_difference (adaptive − fixed), each share
    and the difference with _lo/_hi from a prompt bootstrap (one resampling for both rules:
    paired), confidence_level, bootstrap_resamples.
    """
    require_columns(prefixes, SURVIVAL_COLUMNS, "prefix table")
    if not fits:
        raise ValueError("no partial/final fits: the adaptive rule needs a fit per decision token")
    rows = []
    for tau, at_tau in prefixes.groupby("tau", sort=True):
        fit = interpolate_fit(fits, int(tau))
        prompts = [_scores(group) for _, group in at_tau.groupby("prompt_id", sort=True)]
        prompts = [(partial, final) for partial, final in prompts if len(final)]
        if not prompts:
            continue
        weights = bootstrap_weights(len(prompts), n_resamples, seed).T.astype(float) / len(prompts)
        for delta in deltas:
            adaptive = [adaptive_accepted(list(partial), fit, delta, correction=correction)[0]
                        for partial, _ in prompts]
            kept = np.array([np.mean(keep) for keep in adaptive])
            equal_alpha = min(max(1.0 - kept.mean(), 0.0), math.nextafter(1.0, 0.0))
            fixed = [accepted(list(partial), equal_alpha) for partial, _ in prompts]
            adaptive_ok = np.array([_keeps_best(keep, final) for keep, (_, final) in zip(adaptive, prompts)])
            fixed_ok = np.array([_keeps_best(keep, final) for keep, (_, final) in zip(fixed, prompts)])
            row = {"tau": int(tau), "delta": delta, "n_prompts": len(prompts),
                   "rows": float(np.mean([len(final) for _, final in prompts])), "fit_source": fit.source,
                   "adaptive_kept_frac": kept.mean(), "adaptive_kept_frac_min": kept.min(),
                   "adaptive_kept_frac_max": kept.max(), "equal_alpha": equal_alpha,
                   "fixed_kept_frac": float(np.mean([np.mean(keep) for keep in fixed]))}
            for name, values in (("adaptive_best_survives", adaptive_ok), ("fixed_best_survives", fixed_ok),
                                 ("survives_difference", adaptive_ok.astype(float) - fixed_ok)):
                row[name] = float(np.mean(values))
                (row[f"{name}_lo"], row[f"{name}_hi"]), = (
                    percentile_interval(values @ weights, confidence_level) if n_resamples else [(math.nan,) * 2])
            rows.append(row)
    frame = pd.DataFrame(rows)
    frame["confidence_level"], frame["bootstrap_resamples"] = confidence_level, n_resamples
    return frame


def against_fixed_alpha(
    summary: pd.DataFrame,
    draws: pd.DataFrame | None = None,
    by: Sequence[str] = (),
    confidence_level: float = DEFAULT_CONFIDENCE,
) -> pd.DataFrame:
    """Each adaptive SR point (method ``ADAPTIVE``) against the fixed-α SR curve (method ``FIXED_ALPHA``)
    at equal compute, per ``by`` group.

    The fixed-α points (relative compute, improvement) of the group, ordered by compute, form a
    curve linear in log compute between neighbours (Figure 3's log axis). At an adaptive point's
    relative compute c the curve gives ``fixed_alpha_improvement``; ``gap`` = the adaptive
    point's improvement minus it (> 0: above the curve, better at equal compute). Outside the
    fixed-α points' compute range there is no curve to compare with: status "below_range" or
    "above_range" (cheaper or dearer than every fixed α), gap NaN, and ``dominated_by`` names
    every fixed α that is at least as cheap and scores higher (if any), ``dominates`` every
    fixed α that costs at least as much and scores lower. With ``draws``
    (``analysis.metrics.bootstrap_draws`` of the same runs), gap_lo/gap_hi is the percentile
    interval of the gap over the resamples where c lies inside that resample's fixed-α range
    (their share: in_range_frac).

    Output columns: *by, method_label, delta (from the setting, ``sr_param``), improvement,
    relative_compute, status, fixed_alpha_improvement, gap, gap_lo, gap_hi, in_range_frac,
    dominated_by, dominates; one row per adaptive point, in order of δ.
    """
    require_columns(summary, [*by, *POINT_COLUMNS], "method summary")
    parts = []
    groups = summary.groupby(list(by), sort=False) if by else [((), summary)]
    for keys, group in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        in_group = dict(zip(by, keys, strict=True))
        mine = rows_where(draws, in_group) if draws is not None else None
        part = _against_curve(group, mine, confidence_level)
        for position, (column, key) in enumerate(in_group.items()):
            part.insert(position, column, key)
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _against_curve(points: pd.DataFrame, draws: pd.DataFrame | None, confidence_level: float) -> pd.DataFrame:
    fixed = points[points["method"] == FIXED_ALPHA].sort_values("relative_compute")
    adaptive = points[points["method"] == ADAPTIVE]
    adaptive = adaptive.assign(delta=[sr_param(setting, "delta") for setting in adaptive["setting"]])
    adaptive = adaptive.sort_values("delta", kind="stable")
    rows = []
    for point in adaptive.itertuples(index=False):
        value, status = _on_curve(fixed["relative_compute"], fixed["improvement"], point.relative_compute)
        row = {"method_label": point.method_label, "delta": point.delta, "improvement": point.improvement,
               "relative_compute": point.relative_compute, "status": status, "fixed_alpha_improvement": value,
               "gap": point.improvement - value, "gap_lo": math.nan, "gap_hi": math.nan, "in_range_frac": math.nan,
               "dominated_by": ", ".join(fixed.loc[(fixed["relative_compute"] <= point.relative_compute)
                                                   & (fixed["improvement"] > point.improvement), "method_label"]),
               "dominates": ", ".join(fixed.loc[(fixed["relative_compute"] >= point.relative_compute)
                                                & (fixed["improvement"] < point.improvement), "method_label"])}
        if draws is not None and not draws.empty and not fixed.empty:
            gaps = _resampled_gaps(draws, fixed["method_label"], point.method_label)
            row["in_range_frac"] = float(np.isfinite(gaps).mean())
            (row["gap_lo"], row["gap_hi"]), = percentile_interval(gaps, confidence_level)
        rows.append(row)
    return pd.DataFrame(rows, columns=["method_label", "delta", "improvement", "relative_compute", "status",
                                       "fixed_alpha_improvement", "gap", "gap_lo", "gap_hi", "in_range_frac",
                                       "dominated_by", "dominates"])


def _on_curve(compute: pd.Series, improvement: pd.Series, at: float) -> tuple[float, str]:
    """The curve's improvement at compute ``at`` (linear in log compute), and a status."""
    x, y = np.log(compute.to_numpy(dtype=float)), improvement.to_numpy(dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if not len(x) or not (at > 0 and math.isfinite(at)):
        return math.nan, "no_curve"
    order = np.argsort(x, kind="stable")
    x, y, where = x[order], y[order], math.log(at)
    if where < x[0]:
        return math.nan, "below_range"
    if where > x[-1]:
        return math.nan, "above_range"
    return float(np.interp(where, x, y)), "inside"


def _resampled_gaps(draws: pd.DataFrame, fixed_labels: pd.Series, label: str) -> np.ndarray:
    """Per resample: the adaptive point's improvement minus the fixed-α curve's at its compute."""
    def by_resample(labels, column):
        rows = draws[draws["method_label"].isin(list(labels))]
        return rows.pivot(index="method_label", columns="resample", values=column)

    curve_x, curve_y = by_resample(fixed_labels, "relative_compute"), by_resample(fixed_labels, "improvement")
    own = draws[draws["method_label"] == label].set_index("resample").sort_index()
    gaps = np.full(len(own), math.nan)
    for i, resample in enumerate(own.index):
        value, status = _on_curve(curve_x[resample], curve_y[resample], float(own.at[resample, "relative_compute"]))
        if status == "inside":
            gaps[i] = float(own.at[resample, "improvement"]) - value
    return gaps


def _scores(group: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    group = group[np.isfinite(group["final_score"].to_numpy(dtype=float))]
    partial = group["partial_score"].to_numpy(dtype=float)
    return np.where(np.isfinite(partial), partial, -np.inf), group["final_score"].to_numpy(dtype=float)


def _keeps_best(keep: Sequence[bool], final: np.ndarray) -> bool:
    return bool(np.any(np.asarray(keep) & (final == final.max())))
