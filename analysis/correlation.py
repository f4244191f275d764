"""Do partial rewards predict final rewards? (paper §4, Figures 2 and 4)

Input is the *prefix table*: one row per (prompt, candidate, tau) with columns

    prompt_id, candidate_id, tau, partial_score, final_score, num_tokens, finished_before_tau

where ``partial_score`` is the reward of the first ``tau`` generated tokens, ``final_score``
the reward of the full response and ``num_tokens`` the full response length in tokens.

Each (prompt_id, tau) group is one scatter plot of the paper's Figure 2.  For it we report
rank and linear agreement (Pearson r, Kendall tau-a as defined in Appendix B, with tau-b
beside it, OLS), the oracle cutoff c* and the
tokens an oracle early stop would save, and whether a quantile cut at ``tau`` — the
decision Speculative Rejection makes — keeps the candidate that ends up best.
"""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy import stats

from analysis._columns import require_columns
from analysis.bootstrap import mean_interval
from specrej.records.io import PREFIX_COLUMNS  # torch-free: the table's one definition, which specrej writes
from specrej.methods.cuts import accepted  # the engine's own rule, so the two agree

DEFAULT_ALPHAS = (0.5, 0.7, 0.9)
# Fewer points than this make a correlation coefficient meaningless (n = 2 is always ±1).
MIN_CANDIDATES_FOR_CORRELATION = 3


def survives_column(alpha: float) -> str:
    """Name of the best-survives column for ``alpha``: 0.5 → ``best_survives_alpha_0.5``."""
    return f"best_survives_alpha_{alpha:g}"


def prompt_tau_statistics(
    prefixes: pd.DataFrame, alphas: Sequence[float] = DEFAULT_ALPHAS
) -> pd.DataFrame:
    """One row per (prompt_id, tau) describing how partial rewards predict final ones.

    Output columns:
        prompt_id, tau, n             — the group and its number of candidates
        pearson, kendall, kendall_b   — Pearson r, Kendall tau-a (Appendix B) and tau-b
        ols_slope, ols_r2             — OLS of final on partial (with intercept)
        oracle_cutoff                 — c*, see ``oracle_cutoff``
        tokens_saved_frac             — see ``tokens_saved_fraction``
        best_survives_alpha_<a>       — one bool column per alpha, see ``best_survives``

    Correlation and OLS columns are NaN when n < 3 or either score is constant in the group.
    """
    require_columns(prefixes, PREFIX_COLUMNS, "prefix table")
    if prefixes[["partial_score", "final_score"]].isna().any(axis=None):
        raise ValueError("prefix table has missing partial or final scores")
    rows = [
        {"prompt_id": prompt_id, "tau": tau, **group_statistics(group, alphas)}
        for (prompt_id, tau), group in prefixes.groupby(["prompt_id", "tau"], sort=True)
    ]
    columns = [
        "prompt_id", "tau", "n", "pearson", "kendall", "kendall_b", "ols_slope", "ols_r2",
        "oracle_cutoff", "tokens_saved_frac", *map(survives_column, alphas),
    ]
    return pd.DataFrame(rows, columns=columns)


def group_statistics(group: pd.DataFrame, alphas: Sequence[float] = DEFAULT_ALPHAS) -> dict:
    """The statistics of ``prompt_tau_statistics`` for one (prompt_id, tau) group."""
    partial = group["partial_score"].to_numpy(dtype=float)
    final = group["final_score"].to_numpy(dtype=float)
    tau = group["tau"].iloc[0]
    return {
        "n": len(group),
        **correlations(partial, final),
        "oracle_cutoff": oracle_cutoff(partial, final),
        "tokens_saved_frac": tokens_saved_fraction(
            partial, final, group["num_tokens"].to_numpy(dtype=float), tau
        ),
        **{survives_column(alpha): best_survives(partial, final, alpha) for alpha in alphas},
    }


def correlations(partial: np.ndarray, final: np.ndarray) -> dict[str, float]:
    """Pearson r, Kendall tau-a (``kendall``) and tau-b (``kendall_b``), OLS slope and R² of
    ``final`` on ``partial``, over the candidates whose two scores are finite (`finite_pairs`);
    NaN if degenerate."""
    partial, final = finite_pairs(partial, final)
    if not _is_informative(partial, final):
        return dict.fromkeys(["pearson", "kendall", "kendall_b", "ols_slope", "ols_r2"], math.nan)
    ols = _fit_ols(partial, final)
    tau_b = float(stats.kendalltau(partial, final, variant="b").statistic)
    return {
        "pearson": float(stats.pearsonr(partial, final).statistic),
        "kendall": kendall_tau_a(partial, final, tau_b),
        "kendall_b": tau_b,
        "ols_slope": float(ols.params[1]),
        "ols_r2": float(ols.rsquared),
    }


def kendall_tau_a(x: np.ndarray, y: np.ndarray, tau_b: float | None = None) -> float:
    """Kendall's tau-a, the paper's Appendix B: 2 / (N(N-1)) · Σ_{i<j} sgn(x_i-x_j) sgn(y_i-y_j).

    Unlike tau-b it is not corrected for ties, so tied partial rewards (e.g. identical
    prefixes) pull it towards 0.  It is derived from scipy's O(N log N) tau-b:
    tau_b = (C - D) / sqrt((n0 - n1)(n0 - n2)) with n0 = N(N-1)/2 pairs and n1, n2 the pairs
    tied in x and in y, so C - D = tau_b · sqrt((n0 - n1)(n0 - n2)) and tau_a = (C - D) / n0.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if tau_b is None:
        tau_b = float(stats.kendalltau(x, y, variant="b").statistic)
    n0 = len(x) * (len(x) - 1) / 2
    if n0 == 0 or not np.isfinite(tau_b):
        return math.nan
    return float(tau_b * math.sqrt((n0 - _tied_pairs(x)) * (n0 - _tied_pairs(y))) / n0)


def _tied_pairs(values: np.ndarray) -> float:
    """Number of pairs i < j with values[i] == values[j]."""
    counts = np.unique(values, return_counts=True)[1].astype(float)
    return float((counts * (counts - 1) / 2).sum())


def ols_band(
    partial: np.ndarray,
    final: np.ndarray,
    grid: np.ndarray | None = None,
    confidence_level: float = 0.95,
    grid_size: int = 100,
) -> pd.DataFrame:
    """Fitted OLS line of final on partial with a confidence band for the mean, on a grid.

    ``grid`` defaults to ``grid_size`` evenly spaced points over the range of ``partial``.
    Output columns: partial_score, fit, ci_low, ci_high.  Fitted on the finite pairs
    (`finite_pairs`); empty when they are degenerate (n < 3 or a constant score), so callers can
    simply skip drawing it.
    """
    columns = ["partial_score", "fit", "ci_low", "ci_high"]
    partial, final = finite_pairs(partial, final)
    if not _is_informative(partial, final):
        return pd.DataFrame(columns=columns, dtype=float)
    if grid is None:
        grid = np.linspace(partial.min(), partial.max(), grid_size)
    prediction = _fit_ols(partial, final).get_prediction(_design(np.asarray(grid, dtype=float)))
    band = prediction.summary_frame(alpha=1.0 - confidence_level)
    return pd.DataFrame(
        {
            "partial_score": grid,
            "fit": band["mean"].to_numpy(),
            "ci_low": band["mean_ci_lower"].to_numpy(),
            "ci_high": band["mean_ci_upper"].to_numpy(),
        }
    )


def finite_pairs(partial: np.ndarray, final: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (partial, final) pairs whose two scores are finite. An empty response scores -inf under
    the log-prob reward (a mean over no tokens): it ranks last for the oracle and for the cut, as
    in the engine, but a correlation or a regression needs finite values, so it is left out of
    them."""
    partial, final = np.asarray(partial, dtype=float), np.asarray(final, dtype=float)
    finite = np.isfinite(partial) & np.isfinite(final)
    return partial[finite], final[finite]


def oracle_cutoff(partial: np.ndarray, final: np.ndarray) -> float:
    """c*: the partial score of the candidate whose final score is best.

    If several candidates tie for the best final score we take the highest of their partial
    scores: the oracle needs only one of them to survive, and the highest cutoff stops most.
    """
    is_best = final == np.max(final)
    return float(np.max(partial[is_best]))


def tokens_saved_fraction(
    partial: np.ndarray, final: np.ndarray, num_tokens: np.ndarray, tau: float
) -> float:
    """Share of all generated tokens saved by stopping, at ``tau``, every candidate below c*.

    A stopped candidate saves the tokens it would have generated after ``tau``
    (``num_tokens - tau``, clipped at 0 for responses that ended earlier); the denominator
    is the total ``num_tokens`` of all candidates — the paper's 85.5% example in §4.1.
    """
    total = float(np.sum(num_tokens))
    if total <= 0:
        return math.nan
    stopped = partial < oracle_cutoff(partial, final)
    saved = np.clip(num_tokens[stopped] - tau, 0, None).sum()
    return float(saved / total)


def best_survives(partial: np.ndarray, final: np.ndarray, alpha: float) -> bool:
    """Whether the cut of eq. 4-5 on partial scores accepts a candidate with the best final score.

    The rule is the engine's own (`specrej.methods.cuts.accepted`): every candidate scoring at or
    above r_cut goes on, ties included, so both give the same set on the same scores.
    """
    accept = np.asarray(accepted(list(partial), alpha))
    return bool(np.any(accept & (final == np.max(final))))


def summarize_by_tau(
    statistics: pd.DataFrame,
    confidence_level: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Mean across prompts, per tau, with percentile-bootstrap confidence intervals.

    Input: the output of ``prompt_tau_statistics``.  Summarised metrics: pearson, kendall
    (tau-a), kendall_b (tau-b, when present), tokens_saved_frac and every
    best_survives_alpha_<a> column (as a rate in [0, 1]).
    Output, one row per (tau, metric): tau, metric, mean, ci_low, ci_high, n_prompts.
    NaN values (degenerate prompts) are dropped first; ``n_prompts`` counts what is left.
    Intervals: ``analysis.bootstrap.mean_interval`` (percentile: BCa fails on constant samples,
    which survival indicators often are), the resamples drawn with ``seed`` for every (tau, metric).
    """
    metrics = ["pearson", "kendall", *(["kendall_b"] if "kendall_b" in statistics.columns else []),
               "tokens_saved_frac"] + [
        column for column in statistics.columns if column.startswith("best_survives_alpha_")
    ]
    require_columns(statistics, ["tau", *metrics], "prompt/tau statistics")
    rows = []
    for tau, group in statistics.groupby("tau", sort=True):
        for metric in metrics:
            values = group[metric].astype(float).dropna().to_numpy()
            low, high = mean_interval(values, n_resamples, confidence_level, seed)
            rows.append(
                {
                    "tau": tau,
                    "metric": metric,
                    "mean": values.mean() if len(values) else math.nan,
                    "ci_low": low,
                    "ci_high": high,
                    "n_prompts": len(values),
                }
            )
    return pd.DataFrame(rows, columns=["tau", "metric", "mean", "ci_low", "ci_high", "n_prompts"])


def _is_informative(partial: np.ndarray, final: np.ndarray) -> bool:
    """Enough points and variation in both scores for a correlation or a regression."""
    return (
        len(partial) >= MIN_CANDIDATES_FOR_CORRELATION
        and np.ptp(partial) > 0
        and np.ptp(final) > 0
    )


def _design(partial: np.ndarray) -> np.ndarray:
    # has_constant="add": a one-point grid is constant, and "skip" would drop the intercept.
    return sm.add_constant(partial, has_constant="add")


def _fit_ols(partial: np.ndarray, final: np.ndarray):
    return sm.OLS(final, _design(partial)).fit()
