"""The study's headline (``results/summary.md``): per pair and per method that is not Best-of-N,
its best setting, the Best-of-N it equals, the compute it saves at equal score, and the tokens
it saves.

Inputs are the workflow's analysis tables:

- ``summary``: ``analysis.metrics.method_summary`` output (one row per pair and configuration);
- ``bon_equivalent``: ``analysis.bon_curve.bon_equivalent_compute`` output (every non-BoN
  configuration, located on its pair's Best-of-N curve, with bootstrap intervals);
- ``runs``: the runs frame of ``analysis.io.best_responses_frame`` (one row per run and
  prompt), for the tokens each method generated (``tokens_generated``, ``init_batch_size``,
  ``first_decision_token``) and Best-of-N's mean response length
  (``tokens_generated / num_candidates``);
- ``correlation``: ``analysis.correlation.summarize_by_tau`` output with a ``pair`` column
  (the oracle's ``tokens_saved_frac`` per decision token τ).

Pairs are matched on the ``pair`` display label ("<generator> / <reward>"), the one key all
four tables carry; configurations on ``method_label`` (distinct within a pair).  Methods are
compared only with the reference (Best-of-N, ``reference`` in the display columns), never with
each other here: each method's best setting is chosen among its own settings (a method with the
adaptive cut is a method of its own, so it is never "the best α").  ``headline_table`` and ``token_savings`` return plain frames (written to
``results/metrics/headline.csv``); ``analysis.summary_page.render_headline_markdown`` turns
them into the page.
"""

import math

import numpy as np
import pandas as pd

from analysis._columns import require_columns
from analysis.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_weights, percentile_interval
from analysis.bon_curve import interpolate_log_compute
from analysis.settings import configuration_order, distinct_labels, reference_label, with_display
from analysis.tables import format_ratio

PAIR = "pair"
LABEL_COLUMNS = ("pair_key", "pair", "generator", "reward")
BON_EQUIVALENT_COLUMNS = (
    "pair", "method", "setting", "n", "method_label", "improvement", "improvement_lo", "improvement_hi",
    "relative_compute", "relative_compute_lo", "relative_compute_hi", "bon_equivalent_compute",
    "bon_equivalent_status", "bon_equivalent_compute_extrapolated", "compute_speedup",
    "compute_speedup_lo", "compute_speedup_hi", "bon_equivalent_compute_lo", "bon_equivalent_compute_hi",
    "bon_equivalent_in_range_frac",
)
SUMMARY_COLUMNS = ("pair", "method", "n", "improvement", "relative_compute")
TOKEN_RUN_COLUMNS = ("pair", "method", "setting", "method_label", "n", "prompt_id", "tokens_generated",
                     "num_candidates")
CORRELATION_COLUMNS = ("pair", "tau", "metric", "mean", "ci_low", "ci_high", "n_prompts")
SELECTED_BY_SPEEDUP = "highest compute_speedup among the method's settings inside the Best-of-N range"
SELECTED_BY_SCORE = "no setting of the method inside the Best-of-N range: highest improvement (out of range)"
# The FLOP ratios (analysis.metrics), carried when the inputs have them (NaN otherwise).
FLOP_COLUMNS = ("relative_flops", "relative_flops_lo", "relative_flops_hi")
# The measured CPU (device) seconds beside a modelled eq. 7 (analysis.metrics), likewise.
MEASURED_COLUMNS = ("relative_cpu", "relative_cpu_lo", "relative_cpu_hi")
# The speedup at equal score on the FLOPs axis (analysis.bon_curve), likewise.
FLOP_SPEEDUP_COLUMNS = ("flops_speedup", "flops_speedup_lo", "flops_speedup_hi", "flops_speedup_lo_is_bound",
                        "flops_speedup_hi_is_bound")


def headline_table(summary: pd.DataFrame, bon_equivalent: pd.DataFrame) -> pd.DataFrame:
    """One row per pair and non-BoN configuration: where it lands on the Best-of-N curve, and
    which setting is its method's best.

    The best setting of a method on a pair (``best`` True, ``selection`` says how) is the one
    with the highest ``compute_speedup`` among the method's settings whose BoN-equivalent is
    ``"interpolated"`` (inside the measured Best-of-N curve); when none is inside, the one with
    the highest improvement, with ``in_range`` False.  Ties go to the first setting in the
    summary's order (``analysis.settings.configuration_order``: the smaller α for SR).  Every
    method gets its own best.

    Equivalent N.  Relative compute 1 is Bo-N_min's compute, so ``equivalent_n`` =
    ``bon_equivalent_compute`` × N_min (and likewise its interval and the extrapolated value)
    is the Best-of-N whose compute the point matches (above the ladder extrapolated from its end
    segment; below Bo-N_min none, NaN: no Best-of-N is cheaper), *assuming Best-of-N's compute is
    proportional to N*: the workflow makes Bo-N above one shard from N / shard_size equal
    shards, and counts shards × time.  Below one shard (a single batched run) the assumption
    is looser; ``bon_ladder`` lists each Bo-N's measured relative compute beside N / N_min so
    the reader can check it, and ``equivalent_n_by_score`` reads the same score off the
    (N, improvement) curve directly (log-linear in N, no compute assumption).

    Output columns: the pair labels present (pair_key, pair, generator, reward), method,
    setting, method_label, n (the summary's n: SR's b_init), method_name (its display name), best, selection, in_range,
    improvement(_lo/_hi), relative_compute(_lo/_hi), relative_flops(_lo/_hi) (NaN without FLOP
    counts), bon_equivalent_status, bon_equivalent_compute(_lo/_hi),
    bon_equivalent_compute_extrapolated, equivalent_n(_lo/_hi), equivalent_n_extrapolated,
    equivalent_n_by_score, compute_speedup(_lo/_hi), compute_speedup_extrapolated,
    bon_equivalent_in_range_frac, compute_speedup_lo_is_bound, compute_speedup_hi_is_bound,
    flops_speedup(_lo/_hi, _lo_is_bound, _hi_is_bound) (the speedup on the FLOPs axis: NaN without),
    bon_min_n, bon_max_n, bon_min_improvement, bon_max_improvement, bon_ladder ("Bo8 1.0 (N
    ratio 1.0), Bo16 1.9 (N ratio 2.0), ..."), then n_prompts, n_prompts_improvement,
    zero_spread_prompts, confidence_level, bootstrap_resamples when the inputs carry them.
    Rows: per pair, the methods by name and each method's settings in the input's order.
    """
    require_columns(summary, SUMMARY_COLUMNS, "method summary")
    require_columns(bon_equivalent, BON_EQUIVALENT_COLUMNS, "BoN-equivalent table")
    parts = []
    summary, bon_equivalent = with_display(summary), with_display(bon_equivalent)
    for pair, points in bon_equivalent[~bon_equivalent["reference"]].groupby(PAIR, sort=False):
        bon = summary[(summary[PAIR] == pair) & summary["reference"]].sort_values("n")
        if bon.empty:
            raise ValueError(f"method summary has no Best-of-N rows for pair {pair!r}")
        order = sorted(dict.fromkeys(points["method"]),
                       key=lambda method: configuration_order(False, method, 0, "", ""))
        for method in order:
            parts.append(_method_headline(points[points["method"] == method].reset_index(drop=True), bon))
    if not parts:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "method", "setting", "method_label", "best"])
    return pd.concat(parts, ignore_index=True)


def token_savings(
    runs: pd.DataFrame,
    correlation: pd.DataFrame | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> pd.DataFrame:
    """Tokens each non-BoN configuration saved, next to the oracle bound of the correlation
    study, per pair and configuration.

    Saved, per prompt p: 1 − tokens_generated / (b_init × L(p)), the share of the tokens
    Best-of-b_init would generate running every candidate to completion on p; b_init is the
    initial batch the run recorded (``init_batch_size``, SR's b_init), else the candidates it
    sampled (``num_candidates``).  L(p), the mean response length, is tokens_generated /
    num_candidates of p's Best-of-N run with the most candidates (the largest BoN: every shard's
    candidates).  Both counts are sampled tokens, stop tokens included, so they compare like
    with like.  ``tokens_saved_frac`` is the mean over the prompts on which every setting of the
    method and the Best-of-N reference have a value, with a percentile interval from a prompt
    bootstrap (``bootstrap_weights``: the same resamples for every setting of a method on a
    pair, so its settings are compared on paired resamples).

    Oracle: the correlation summary's ``tokens_saved_frac`` (the tokens an oracle saves by
    stopping, at τ, every candidate scoring below the eventual best's partial score) at τ =
    the configuration's first decision token: the most common ``first_decision_token`` over the
    prompts (``rounds[0].decision_token``: SR decides when its memory budget fills, at or after
    ``min_tokens``), or ``min_tokens`` when rounds were not recorded.  When that τ is not a
    decision token of the correlation study, the nearest studied τ (the smaller on a tie)
    stands in with ``oracle_tau_exact`` False; a pair without a correlation study, or a method
    without decision tokens, gets NaN.

    Output columns: pair, method, setting, method_label, method_name (one row per non-BoN configuration, in
    the summary's order; labels made distinct as there), init_batch_size (b_init), min_tokens,
    first_decision_token, first_decision_token_min, first_decision_token_max,
    decision_token_source ("rounds" | "min_tokens" | "unknown"), reference_bon_n, n_prompts,
    tokens_saved_frac, tokens_saved_frac_lo, tokens_saved_frac_hi, oracle_tau,
    oracle_tau_exact, correlation_taus (comma-separated), oracle_tokens_saved_frac,
    oracle_tokens_saved_frac_lo, oracle_tokens_saved_frac_hi, oracle_n_prompts,
    confidence_level, bootstrap_resamples.
    """
    require_columns(runs, TOKEN_RUN_COLUMNS, "runs")
    if correlation is not None:
        require_columns(correlation, CORRELATION_COLUMNS, "correlation summary")
    runs = with_display(runs)
    parts = []
    for pair, rows in runs.groupby(PAIR, sort=False):
        if (~rows["reference"]).any():
            part = _pair_token_savings(rows, n_resamples, confidence_level, seed)
            part.insert(0, PAIR, pair)
            parts.append(_with_oracle(part, correlation))
    if not parts:
        return pd.DataFrame(columns=[PAIR, "method", "setting", "method_label", "tokens_saved_frac"])
    return pd.concat(parts, ignore_index=True)


# --------------------------------------------------------------------------------------
# headline_table
# --------------------------------------------------------------------------------------


def _method_headline(points: pd.DataFrame, bon: pd.DataFrame) -> pd.DataFrame:
    """The rows of one method on one pair, its best setting marked."""
    n_min, n_max = int(bon["n"].iloc[0]), int(bon["n"].iloc[-1])
    out = pd.DataFrame({column: points[column] for column in LABEL_COLUMNS if column in points.columns})
    for column in ("method", "setting", "method_label", "n", "method_name"):
        out[column] = points[column]
    status = points["bon_equivalent_status"].astype(str)
    out["in_range"] = status == "interpolated"
    best = _best_row(points, out["in_range"])
    out["best"] = out.index == best
    out["selection"] = SELECTED_BY_SPEEDUP if out["in_range"].any() else SELECTED_BY_SCORE
    for column in ("improvement", "relative_compute"):
        for suffix in ("", "_lo", "_hi"):
            out[column + suffix] = points[column + suffix].astype(float)
    for column in (*FLOP_COLUMNS, *MEASURED_COLUMNS):
        out[column] = points[column].astype(float) if column in points.columns else math.nan
    out["bon_equivalent_status"] = status
    suffixes = ("", "_lo", "_hi", "_extrapolated")
    for suffix in suffixes:
        out[f"bon_equivalent_compute{suffix}"] = points[f"bon_equivalent_compute{suffix}"].astype(float)
    for suffix in suffixes:
        out[f"equivalent_n{suffix}"] = out[f"bon_equivalent_compute{suffix}"] * n_min
    out["equivalent_n_by_score"] = [
        _locate_n(bon, target) for target in points["improvement"].astype(float)]
    for column in ("compute_speedup", "compute_speedup_lo", "compute_speedup_hi"):
        out[column] = points[column].astype(float)
    out["compute_speedup_extrapolated"] = (points["compute_speedup_extrapolated"].astype(float)
                                           if "compute_speedup_extrapolated" in points.columns
                                           else out["bon_equivalent_compute_extrapolated"] / out["relative_compute"])
    # Below Bo-N_min there is no Best-of-N to compare with (Best-of-N below the ladder is not a
    # smaller N): no extrapolated equivalent there; above the ladder the extrapolation stays, marked.
    below = (status == "below_range").to_numpy()
    for column in ("bon_equivalent_compute_extrapolated", "equivalent_n_extrapolated", "compute_speedup_extrapolated"):
        out.loc[below, column] = math.nan
    out["bon_equivalent_in_range_frac"] = points["bon_equivalent_in_range_frac"].astype(float)
    for column in ("compute_speedup_lo_is_bound", "compute_speedup_hi_is_bound"):
        out[column] = points[column].astype(bool) if column in points.columns else False
    for column in FLOP_SPEEDUP_COLUMNS:  # the same speedup on the FLOPs axis (bon_curve.FLOP_AXIS)
        bound = column.endswith("_is_bound")
        out[column] = (points[column].astype(bool if bound else float) if column in points.columns
                       else False if bound else math.nan)
    out["bon_min_n"], out["bon_max_n"] = n_min, n_max
    out["bon_min_improvement"] = float(bon["improvement"].iloc[0])
    out["bon_max_improvement"] = float(bon["improvement"].iloc[-1])
    out["bon_ladder"] = ", ".join(f"{reference_label(n)} {format_ratio(c)} (N ratio {format_ratio(n / n_min)})"
                                  for n, c in zip(bon["n"], bon["relative_compute"], strict=True))
    for column in ("n_prompts", "n_prompts_improvement", "zero_spread_prompts", "confidence_level",
                   "bootstrap_resamples"):
        if column in points.columns:
            out[column] = points[column]
    if "zero_spread_prompts" in out.columns:
        out["zero_spread_prompts"] = ["" if pd.isna(value) else str(value) for value in out["zero_spread_prompts"]]
    return out


def _best_row(points: pd.DataFrame, in_range: pd.Series) -> int | None:
    """Index of a method's best setting: highest speedup inside the range, else highest improvement."""
    if in_range.any():
        candidates = points.loc[in_range, "compute_speedup"].astype(float)
    else:
        candidates = points["improvement"].astype(float)
    candidates = candidates[np.isfinite(candidates)]
    return None if candidates.empty else int(candidates.idxmax())  # idxmax: the first (smallest α) on ties


def _locate_n(bon: pd.DataFrame, target: float) -> float:
    where = interpolate_log_compute(bon["n"].astype(float), bon["improvement"].astype(float), target)
    return where.compute


# --------------------------------------------------------------------------------------
# token_savings
# --------------------------------------------------------------------------------------


def _pair_token_savings(runs: pd.DataFrame, n_resamples: int, confidence_level: float, seed: int) -> pd.DataFrame:
    bon = runs[runs["reference"] & (runs["num_candidates"] > 0)]
    reference = bon.sort_values(["num_candidates", "n"]).drop_duplicates("prompt_id", keep="last")
    length = (reference["tokens_generated"].astype(float) / reference["num_candidates"].astype(float))
    length = length.set_axis(reference["prompt_id"])
    others = runs[~runs["reference"]].copy()
    configs = others.drop_duplicates(["method", "setting"])[["method", "setting", "method_label", "n", "method_name"]]
    configs = configs.iloc[sorted(range(len(configs)), key=lambda i: configuration_order(
        False, *configs.iloc[i][["method", "n", "method_label", "setting"]]))]
    labels = dict(zip(zip(configs["method"], configs["setting"]),
                      distinct_labels(list(configs[["method", "setting", "method_label"]]
                                           .itertuples(index=False, name=None))), strict=True))
    others["label"] = [labels[key] for key in zip(others["method"], others["setting"])]
    b_init = others["init_batch_size"] if "init_batch_size" in others.columns else others["n"]
    others["b_init"] = b_init.astype(float).fillna(others["num_candidates"].astype(float))
    denominator = others["b_init"] * others["prompt_id"].map(length)
    with np.errstate(divide="ignore", invalid="ignore"):
        others["saved"] = 1.0 - others["tokens_generated"].astype(float) / denominator.where(denominator > 0)
    rows = []
    for method in dict.fromkeys(configs["method"]):
        order = [labels[key] for key in zip(configs["method"], configs["setting"]) if key[0] == method]
        mine = others[others["method"] == method]
        saved = mine.pivot(index="label", columns="prompt_id", values="saved").loc[order]
        saved = saved.loc[:, np.isfinite(saved.to_numpy(dtype=float)).all(axis=0)]
        values = saved.to_numpy(dtype=float)  # (settings, prompts)
        n_prompts = values.shape[1]
        point = values.mean(axis=1) if n_prompts else np.full(len(saved), math.nan)
        interval = np.full((len(saved), 2), math.nan)
        if n_prompts and n_resamples:
            weights = bootstrap_weights(n_prompts, n_resamples, seed).T.astype(float)  # (P, R)
            interval = percentile_interval(values @ weights / n_prompts, confidence_level)
        for position, label in enumerate(saved.index):
            setting = mine[mine["label"] == label]
            token, low, high, source = _first_decision(setting)
            rows.append({
                "method": method, "setting": setting["setting"].iloc[0], "method_label": label,
                "method_name": setting["method_name"].iloc[0],
                "init_batch_size": _single(setting["b_init"]),
                "min_tokens": _single(setting["min_tokens"]) if "min_tokens" in setting.columns else math.nan,
                "first_decision_token": token, "first_decision_token_min": low, "first_decision_token_max": high,
                "decision_token_source": source,
                "reference_bon_n": _single(reference["n"]) if not reference.empty else math.nan,
                "n_prompts": n_prompts, "tokens_saved_frac": point[position],
                "tokens_saved_frac_lo": interval[position, 0], "tokens_saved_frac_hi": interval[position, 1],
                "confidence_level": confidence_level, "bootstrap_resamples": n_resamples,
            })
    return pd.DataFrame(rows)


def _first_decision(runs: pd.DataFrame) -> tuple[float, float, float, str]:
    """(most common first decision token, its min, its max, where it came from)."""
    if "first_decision_token" in runs.columns:
        tokens = runs["first_decision_token"].astype(float).dropna()
        if not tokens.empty:
            return float(tokens.mode().min()), float(tokens.min()), float(tokens.max()), "rounds"
    if "min_tokens" in runs.columns:
        tokens = runs["min_tokens"].astype(float).dropna()
        if not tokens.empty:
            return float(tokens.mode().min()), float(tokens.min()), float(tokens.max()), "min_tokens"
    return math.nan, math.nan, math.nan, "unknown"


def _single(values: pd.Series) -> float:
    """The value of a column that should be constant (the largest when it is not)."""
    values = values.astype(float).dropna()
    return float(values.max()) if not values.empty else math.nan


def _with_oracle(part: pd.DataFrame, correlation: pd.DataFrame | None) -> pd.DataFrame:
    columns = ["oracle_tau", "oracle_tau_exact", "correlation_taus", "oracle_tokens_saved_frac",
               "oracle_tokens_saved_frac_lo", "oracle_tokens_saved_frac_hi", "oracle_n_prompts"]
    found = pd.DataFrame([dict.fromkeys(columns, math.nan)] * len(part))
    found["oracle_tau_exact"], found["correlation_taus"] = False, ""
    if correlation is not None:
        oracle = correlation[(correlation[PAIR] == part[PAIR].iloc[0])
                             & (correlation["metric"] == "tokens_saved_frac")].sort_values("tau")
        taus = oracle["tau"].astype(float).to_numpy()
        found["correlation_taus"] = ", ".join(f"{tau:g}" for tau in taus)
        for row, token in enumerate(part["first_decision_token"]):
            if not taus.size or not np.isfinite(token):
                continue
            nearest = int(np.argmin(np.abs(taus - token)))  # the smaller on a tie (taus are sorted)
            hit = oracle.iloc[nearest]
            found.loc[row, ["oracle_tau", "oracle_tokens_saved_frac", "oracle_tokens_saved_frac_lo",
                            "oracle_tokens_saved_frac_hi", "oracle_n_prompts"]] = [
                taus[nearest], hit["mean"], hit["ci_low"], hit["ci_high"], hit["n_prompts"]]
            found.loc[row, "oracle_tau_exact"] = bool(taus[nearest] == token)
    found["oracle_tau_exact"] = found["oracle_tau_exact"].astype(bool)
    return pd.concat([part.drop(columns=["confidence_level", "bootstrap_resamples"]), found,
                      part[["confidence_level", "bootstrap_resamples"]]], axis=1)
