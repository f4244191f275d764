"""Paper §5 metrics: improvement score (eq. 8), relative compute and speedup (eq. 7), the same
ratios in FLOPs, perplexity (Figure 3 and Table 2), each with a prompt-level paired bootstrap
confidence interval. Where a configuration falls on the Best-of-N curve (BoN-equivalent compute,
speedup at equal score) is ``analysis.bon_curve``'s, from this module's output.

Most functions take a *runs* frame (``analysis.io.best_responses_frame``), one row per
(configuration, prompt):

    method       the setting's method (any method: the reference, Best-of-N, is told by
                 ``reference``)
    setting      the setting's parameters as canonical JSON text (``analysis.settings``);
                 ``{"n":N}`` for Best-of-N
    method_label the configuration's display name ("Bo120", "SR α=0.5", "First 2 of 3")
    n            the reference's N (read for the reference only: the ladder's order, Bo-N_min
                 and the largest BoN); anything, NaN included, for the other methods
    prompt_id    the prompt
    score        reward of the response the method returned for this prompt
    worst_score  lowest final reward among the configuration's complete candidates for this
                 prompt; needed for Bo-N_min's rows by eq. 8 (``analysis.io`` fills it)
    time_s       wall-clock seconds spent on this prompt
    cpu_s        optional: the measured CPU (device) seconds of the prompt's work (``timing.compute_s``),
                 a check beside ``work_s`` where that is modelled from the steps
    work_s       optional: the compute of this prompt's work, which does not depend on the
                 machine's other work (the process's CPU seconds on a CPU, device seconds on
                 CUDA: the record's ``timing.compute_s``); eq. 7 counts it. Absent, or NaN for
                 any row (records made before it was recorded), eq. 7 counts ``time_s`` for
                 every row, with a warning when the column is there
    threads      optional: torch's CPU threads of the run (CPU seconds compare at one thread count)
    shards       optional, default 1: devices that ran in parallel during ``time_s``
                 (the paper's GPU count — Bo3840 as 32 parallel Bo120 shards has shards=32).
                 Shards run one after another on one device are already summed in ``time_s``
                 and must keep shards=1.
    flops        optional: FLOPs spent on this prompt (``specrej.records.flops``; a merged BoN record
                 holds the sum over its shards); NaN or absent when not counted
    perplexity   optional: perplexity of the returned response (see ``perplexity``)

optionally the display columns (method_name, color, marker, reference; filled by
``analysis.settings.with_display`` where absent), plus any grouping columns named in ``by`` (e.g. ``pair`` or ``generator``).  A configuration
is a distinct (method, setting) (``CONFIG_COLUMNS``): nothing here reads a method's parameters,
so every method is summarised, and located on the Best-of-N curve, alike.  Bo-N_min is the BoN
configuration with the smallest N in its group and "the largest BoN" the one with the largest
N.  Only prompts that every configuration of a group answered enter that group's metrics, so
failed prompts cannot make a method look cheaper or better.  Two configurations of a group that
share a label are told apart by ``analysis.settings.distinct_labels``.

Confidence intervals come from one prompt-level bootstrap per group (``analysis.bootstrap``):
*the same* resamples serve every configuration of the group, so differences and ratios between
configurations (relative compute, speedup, the position of a method on the BoN curve) are
paired.  Intervals are percentile intervals.
"""

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis._columns import require_columns
from analysis.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_weights, percentile_interval
from analysis.settings import DISPLAY_COLUMNS, configuration_order, distinct_labels, reference_rows, with_display

RUN_COLUMNS = ("method", "setting", "method_label", "n", "prompt_id", "score", "time_s")
CONFIG_COLUMNS = ["method", "setting"]
# The columns that describe a configuration in ``method_summary`` / ``bootstrap_draws`` output.
CONFIGURATION_COLUMNS = ["method", "setting", "method_label", "n", *DISPLAY_COLUMNS]
Normalization = Literal["bon_min_range", "bon_range"]
NORMALIZATIONS = ("bon_min_range", "bon_range")
# Statistics that get a bootstrap interval in ``method_summary`` (perplexity when present).
INTERVAL_STATISTICS = ("improvement", "relative_compute", "speedup_vs_largest_bon", "relative_wall",
                       "wall_speedup_vs_largest_bon", "relative_cpu", "relative_flops", "flops_speedup_vs_largest_bon",
                       "perplexity")


def perplexity(token_logprobs: Sequence[float]) -> float:
    """exp(-mean log-prob) of a response's tokens under the generator; NaN for no tokens.

    The mean log-prob itself is the paper's §5.3 "logprob" reward.
    """
    logprobs = np.asarray(token_logprobs, dtype=float)
    return float(np.exp(-logprobs.mean())) if logprobs.size else math.nan


def per_prompt_improvement(runs: pd.DataFrame, normalization: Normalization = "bon_min_range") -> pd.Series:
    """Improvement score of every row of ``runs`` (one group: call through ``method_summary``).

    Both normalisations read improvement(p) = 100 * (1 - (top(p) - score(p)) / spread(p))
    with top(p) the reward of Bo-N_min's returned (best) response:

    - ``"bon_min_range"`` (default, the paper's eq. 8): spread(p) = top(p) minus the lowest
      reward among Bo-N_min's candidates (``worst_score``), so rewards are measured in units
      of Bo-N_min's own reward range and Bo-N_min scores 100;
    - ``"bon_range"`` (an alternative, not the paper's): spread(p) = largest BoN's reward
      minus top(p), so Bo-N_min scores 100 and the largest BoN 200.

    A prompt whose spread is not positive (or not finite) cannot be normalised and gets NaN;
    ``zero_spread_prompts`` names such prompts.
    """
    top, spread = _reference_range(runs, normalization)
    top, spread = runs["prompt_id"].map(top), runs["prompt_id"].map(spread)
    return 100.0 * (1.0 - (top - runs["score"]) / spread.where((spread > 0) & np.isfinite(spread)))


def zero_spread_prompts(runs: pd.DataFrame, normalization: Normalization = "bon_min_range") -> list:
    """Prompts of ``runs`` (one group) whose improvement score is undefined, sorted as text."""
    _, spread = _reference_range(runs, normalization)
    return sorted(spread.index[~(spread > 0) | ~np.isfinite(spread)], key=str)


def method_summary(
    runs: pd.DataFrame,
    by: Sequence[str] = (),
    normalization: Normalization = "bon_min_range",
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per configuration (within each ``by`` group): Figure 3's points, Table 2's cells.

    Output columns: *by, method, setting, method_label, n (Best-of-N's N; for another method
    its most common ``n`` over the prompts, e.g. SR's b_init), method_name, color, marker,
    reference (the configuration's display), n_prompts (prompts shared by all
    configurations of the group), mean_score, improvement (mean of ``per_prompt_improvement``
    over the prompts that can be normalised), n_prompts_improvement (those prompts),
    zero_spread_prompts (comma-separated ids of the others, "" if none), compute_s (sum over
    prompts of shards × work_s, the measured compute: see the module's ``work_s``), relative_compute
    (compute_s / compute_s of Bo-N_min: eq. 7), speedup_vs_largest_bon (compute_s of the largest
    BoN / compute_s), wall_s, relative_wall and wall_speedup_vs_largest_bon (the same in
    wall-clock seconds, shards × time_s), cpu_s and relative_cpu (the same in the measured CPU or
    device seconds, shards × ``cpu_s``, where eq. 7's ``work_s`` is modelled; NaN without the column), compute_flops (sum over
    prompts of ``flops``), relative_flops (compute_flops / compute_flops of Bo-N_min: eq. 7 in
    FLOPs), flops_speedup_vs_largest_bon (compute_flops of the largest BoN / compute_flops) —
    the FLOP columns NaN unless every prompt of both configurations has a count —,
    perplexity (mean over prompts) when ``runs`` has that column, then <statistic>_lo and
    <statistic>_hi for each of improvement, relative_compute, speedup_vs_largest_bon,
    relative_wall, wall_speedup_vs_largest_bon, relative_cpu, relative_flops, flops_speedup_vs_largest_bon and perplexity (``confidence_level`` paired
    bootstrap interval over ``n_resamples`` prompt resamples drawn with ``seed``; NaN when
    ``n_resamples`` is 0), and the bootstrap's confidence_level and bootstrap_resamples.
    Rows: Best-of-N by N, then the other methods by name, each method's settings in the
    natural order of their labels (``analysis.settings.configuration_order``).
    Speedup is measured in compute (``work_s``), and in wall-clock time beside it.
    """
    runs = _check_runs(runs, by, normalization)
    return _for_each_group(
        runs, by, lambda group: _summarize_group(group, normalization, n_resamples, confidence_level, seed)
    )


def bootstrap_draws(
    runs: pd.DataFrame,
    by: Sequence[str] = (),
    normalization: Normalization = "bon_min_range",
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> pd.DataFrame:
    """The bootstrap statistics behind ``method_summary``'s intervals, one row per resample.

    Columns: *by, method, setting, method_label, n, method_name, color, marker, reference, resample, improvement, relative_compute,
    speedup_vs_largest_bon, relative_flops, flops_speedup_vs_largest_bon (and perplexity).  With
    the same arguments the resamples are exactly those of ``method_summary``;
    ``analysis.bon_curve.bon_equivalent_compute`` locates every non-BoN configuration on each.
    """
    runs = _check_runs(runs, by, normalization)

    def draws_of(group: pd.DataFrame) -> pd.DataFrame:
        weights = bootstrap_weights(_n_common_prompts(group), n_resamples, seed)
        configs, values = _group_statistics(group, normalization, weights)
        statistics = ["improvement", "relative_compute", "speedup_vs_largest_bon", "relative_wall",
                      "wall_speedup_vs_largest_bon", "relative_cpu", "relative_flops", "flops_speedup_vs_largest_bon",
                      "perplexity"]
        return configs.loc[configs.index.repeat(n_resamples)].reset_index(drop=True).assign(
            resample=np.tile(np.arange(n_resamples), len(configs)),
            **{name: values[name].ravel() for name in statistics if name in values},
        )

    return _for_each_group(runs, by, draws_of)


def _check_runs(runs: pd.DataFrame, by: Sequence[str], normalization: str) -> pd.DataFrame:
    """``runs`` checked: its columns, one row per configuration and prompt, one label per
    configuration."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, not {normalization!r}")
    require_columns(runs, [*RUN_COLUMNS, *by], "runs")
    if normalization == "bon_min_range":
        require_columns(runs, ["worst_score"], "runs (eq. 8 needs Bo-N_min's lowest candidate reward)")
    duplicated = runs.duplicated([*by, *CONFIG_COLUMNS, "prompt_id"])
    if duplicated.any():
        example = runs.loc[duplicated, [*by, *CONFIG_COLUMNS, "prompt_id"]].iloc[0].to_dict()
        raise ValueError(f"runs has several rows for one configuration and prompt, e.g. {example}")
    labels = runs.groupby([*by, *CONFIG_COLUMNS], dropna=False, sort=False)["method_label"].nunique()
    if (labels > 1).any():
        example = labels[labels > 1].index[0]
        raise ValueError(f"runs has several method_label values for one configuration, e.g. {example}")
    return with_display(runs.assign(work_s=eq7_seconds(runs)))


def eq7_seconds(runs: pd.DataFrame) -> pd.Series:
    """The seconds eq. 7 counts per row: ``work_s`` when every row has it, else ``time_s``
    (wall-clock) for every row, so one measure serves every configuration."""
    if "work_s" not in runs.columns:
        return runs["time_s"]
    work = pd.to_numeric(runs["work_s"], errors="coerce")
    if work.notna().all():
        if "threads" in runs.columns and runs["threads"].nunique() > 1:
            counts = ", ".join(map(str, sorted(runs["threads"].dropna().unique())))
            warnings.warn(f"the runs used different CPU thread counts ({counts}): their CPU seconds (eq. 7's "
                          "compute) are not comparable; rerun them with one --threads", stacklevel=3)
        return work
    warnings.warn(f"{int(work.isna().sum())} of {len(work)} runs have no timing.compute_s (made before it was "
                  "recorded): eq. 7's compute is wall-clock time (timing.total_s) for all of them", stacklevel=3)
    return runs["time_s"]


def _reference_range(runs: pd.DataFrame, normalization: str) -> tuple[pd.Series, pd.Series]:
    """Per prompt: Bo-N_min's best reward and the spread that normalises improvement."""
    bon = runs[reference_rows(runs)]
    if bon.empty:
        raise ValueError("a group has no BoN configuration to normalise against")
    bon_min = bon[bon["n"] == bon["n"].min()].set_index("prompt_id")
    top = bon_min["score"]
    if normalization == "bon_min_range":
        spread = top - bon_min["worst_score"]
    elif normalization == "bon_range":
        spread = bon[bon["n"] == bon["n"].max()].set_index("prompt_id")["score"] - top
    else:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, not {normalization!r}")
    return top, spread


def _summarize_group(
    runs: pd.DataFrame, normalization: str, n_resamples: int, confidence_level: float, seed: int
) -> pd.DataFrame:
    n_prompts = _n_common_prompts(runs)
    runs = _on_common_prompts(runs)
    summary, point = _group_statistics(runs, normalization, np.ones((1, n_prompts), dtype=int))
    _, draws = _group_statistics(runs, normalization, bootstrap_weights(n_prompts, n_resamples, seed))
    summary = summary.assign(
        n_prompts=n_prompts,
        **{name: values[:, 0] for name, values in point.items()},
        zero_spread_prompts=",".join(map(str, zero_spread_prompts(runs, normalization))),
    ).astype({"n_prompts_improvement": int})
    order = [*CONFIGURATION_COLUMNS, "n_prompts", "mean_score", "improvement", "n_prompts_improvement",
             "zero_spread_prompts", "compute_s", "relative_compute", "speedup_vs_largest_bon", "wall_s",
             "relative_wall", "wall_speedup_vs_largest_bon", "cpu_s", "relative_cpu", "compute_flops",
             "relative_flops", "flops_speedup_vs_largest_bon"]
    summary = summary[order + (["perplexity"] if "perplexity" in point else [])]
    for name in INTERVAL_STATISTICS:
        if name in draws:
            interval = percentile_interval(draws[name], confidence_level)
            summary[f"{name}_lo"], summary[f"{name}_hi"] = interval[:, 0], interval[:, 1]
    summary["confidence_level"], summary["bootstrap_resamples"] = confidence_level, n_resamples
    return summary


def _group_statistics(
    runs: pd.DataFrame, normalization: str, weights: np.ndarray
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Configurations of one group and their statistics under each row of prompt ``weights``.

    Returns the configurations (CONFIGURATION_COLUMNS; in ``configuration_order``:
    Best-of-N by N, then the other methods by name and their settings by label — the order of
    Figure 3's series and of the tables; labels made distinct by ``distinct_labels``) and a dict
    of (C, R) arrays, R = len(weights): mean_score, improvement, n_prompts_improvement,
    compute_s, relative_compute, speedup_vs_largest_bon, wall_s, relative_wall,
    wall_speedup_vs_largest_bon, compute_flops, relative_flops,
    flops_speedup_vs_largest_bon and perplexity (if present).  A weight row of ones is the
    sample itself, so point estimates and resamples share one formula.
    """
    runs = _on_common_prompts(runs)
    configs = runs.groupby(CONFIG_COLUMNS, sort=False, dropna=False).agg(
        method_label=("method_label", "first"), n=("n", _typical),
        **{column: (column, "first") for column in DISPLAY_COLUMNS}).reset_index()
    order = sorted(range(len(configs)), key=lambda i: configuration_order(*configs.loc[
        i, ["reference", "method", "n", "method_label", "setting"]]))
    configs = configs.loc[order].reset_index(drop=True)[CONFIGURATION_COLUMNS]
    configs["method_label"] = distinct_labels(list(configs[["method", "setting", "method_label"]]
                                                   .itertuples(index=False, name=None)))
    position = {key: i for i, key in enumerate(configs[CONFIG_COLUMNS].itertuples(index=False, name=None))}
    runs = runs.assign(
        improvement=per_prompt_improvement(runs, normalization),
        compute_s=runs["work_s"] * runs.get("shards", 1),
        wall_s=runs["time_s"] * runs.get("shards", 1),
        cpu_s=(runs["cpu_s"] if "cpu_s" in runs.columns else math.nan) * runs.get("shards", 1),
        compute_flops=runs["flops"] if "flops" in runs.columns else math.nan,
        config=[position[key] for key in runs[CONFIG_COLUMNS].itertuples(index=False, name=None)],
    )

    def per_prompt(column: str) -> np.ndarray:  # (C, P), prompts in one shared order
        return runs.pivot(index="config", columns="prompt_id", values=column).to_numpy(dtype=float)

    weights = weights.T.astype(float)  # (P, R)
    improvement, used = _weighted_mean(per_prompt("improvement"), weights)
    bon = configs.index[configs["reference"].astype(bool)]
    smallest, largest = bon[0], bon[-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        compute, flops = per_prompt("compute_s") @ weights, per_prompt("compute_flops") @ weights
        wall, cpu = per_prompt("wall_s") @ weights, per_prompt("cpu_s") @ weights
        values = {
            "mean_score": _weighted_mean(per_prompt("score"), weights)[0],
            "improvement": improvement,
            "n_prompts_improvement": used,
            "compute_s": compute,
            "relative_compute": compute / compute[smallest],
            "speedup_vs_largest_bon": compute[largest] / compute,
            "wall_s": wall,
            "relative_wall": wall / wall[smallest],
            "wall_speedup_vs_largest_bon": wall[largest] / wall,
            "cpu_s": cpu,
            "relative_cpu": cpu / cpu[smallest],
            "compute_flops": flops,
            "relative_flops": flops / flops[smallest],
            "flops_speedup_vs_largest_bon": flops[largest] / flops,
        }
    if "perplexity" in runs.columns:
        values["perplexity"] = _weighted_mean(per_prompt("perplexity"), weights)[0]
    return configs, values


def _typical(values: pd.Series) -> float:
    """The most common value (the smallest on a tie; NaN when none is known): a configuration's
    n, constant for Best-of-N, possibly per prompt for another method (SR's default b_init)."""
    modes = values.dropna().mode()
    return modes.min() if not modes.empty else math.nan


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration and resample, the mean of the finite values and how many entered it."""
    finite = np.isfinite(values)
    totals, counts = np.where(finite, values, 0.0) @ weights, finite.astype(float) @ weights
    return np.divide(totals, counts, out=np.full_like(totals, math.nan), where=counts > 0), counts


def _on_common_prompts(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows of the prompts that every configuration in ``runs`` answered."""
    n_configs = len(runs[CONFIG_COLUMNS].drop_duplicates())
    configs_per_prompt = runs.groupby("prompt_id")["prompt_id"].transform("size")
    return runs[configs_per_prompt == n_configs]


def _n_common_prompts(runs: pd.DataFrame) -> int:
    n_prompts = _on_common_prompts(runs)["prompt_id"].nunique()
    if n_prompts == 0:
        raise ValueError("no prompt was answered by every configuration of a group")
    return n_prompts


def _for_each_group(
    frame: pd.DataFrame, by: Sequence[str], summarize: Callable[[pd.DataFrame], pd.DataFrame]
) -> pd.DataFrame:
    """Apply ``summarize`` per ``by`` group and put the group keys back as leading columns."""
    if not by:
        return summarize(frame)
    parts = []
    for keys, group in frame.groupby(list(by), sort=False):
        part = summarize(group.drop(columns=list(by)))
        for position, (column, key) in enumerate(zip(by, keys, strict=True)):
            part.insert(position, column, key)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)
