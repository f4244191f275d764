"""Paper §5 metrics: improvement score, relative compute, speedup, BoN-equivalent compute,
perplexity (Figure 3 and Table 2).

Most functions take a *runs* frame, one row per (configuration, prompt):

    method      "bon" | "sr"
    n           number of candidates (Best-of-N's N; Speculative Rejection's initial batch)
    alpha       SR rejection rate; NaN for BoN
    prompt_id   the prompt
    score       reward of the response the method returned for this prompt
    time_s      wall-clock seconds spent on this prompt
    shards      optional, default 1: devices that ran in parallel during ``time_s``
                (the paper's GPU count — Bo3840 as 32 parallel Bo120 shards has shards=32).
                Shards run one after another on one device are already summed in ``time_s``
                and must keep shards=1.
    perplexity  optional: perplexity of the returned response (see ``perplexity``)

plus any grouping columns named in ``by`` (e.g. ``pair`` or ``generator``).  A configuration
is a distinct (method, n, alpha).  Bo-N_min is the BoN configuration with the smallest N in
its group and "the largest BoN" the one with the largest N.  Only prompts that every
configuration of a group answered enter that group's metrics, so failed prompts cannot make
a method look cheaper or better.
"""

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis._columns import require_columns

RUN_COLUMNS = ("method", "n", "alpha", "prompt_id", "score", "time_s")
CONFIG_COLUMNS = ["method", "n", "alpha"]
ReferenceMax = Literal["largest_bon", "all_methods"]


def method_label(method: str, n: int, alpha: float) -> str:
    """Display name of a configuration: ``Bo120`` for BoN, ``SR α=0.5`` for Speculative Rejection."""
    if method == "bon":
        return f"Bo{int(n)}"
    if method == "sr":
        return f"SR α={alpha:g}"
    raise ValueError(f"unknown method {method!r}; expected 'bon' or 'sr'")


def perplexity(token_logprobs: Sequence[float]) -> float:
    """exp(-mean log-prob) of a response's tokens under the generator; NaN for no tokens.

    The mean log-prob itself is the paper's §5.3 "logprob" reward.
    """
    logprobs = np.asarray(token_logprobs, dtype=float)
    return float(np.exp(-logprobs.mean())) if logprobs.size else math.nan


def per_prompt_improvement(
    runs: pd.DataFrame, reference_max: ReferenceMax = "largest_bon"
) -> pd.Series:
    """Improvement score of every row of ``runs`` (one group: call through ``method_summary``).

    For prompt p with reference rewards r_min(p) = score of Bo-N_min and r_max(p),

        improvement(p) = 100 * (1 + (score(p) - r_min(p)) / (r_max(p) - r_min(p)))

    so Bo-N_min scores 100.  With ``reference_max="largest_bon"`` r_max(p) is the score of
    the largest BoN, which therefore scores 200; with ``"all_methods"`` it is the best score
    any configuration reached on p, so nothing exceeds 200.  A prompt whose r_max(p) is not
    above r_min(p) cannot be normalised (the range is empty or, with independent samples,
    even reversed) and gets NaN.
    """
    bon = runs[runs["method"] == "bon"]
    r_min = _scores_of(bon[bon["n"] == bon["n"].min()])
    if reference_max == "largest_bon":
        r_max = _scores_of(bon[bon["n"] == bon["n"].max()])
    elif reference_max == "all_methods":
        r_max = runs.groupby("prompt_id")["score"].max()
    else:
        raise ValueError(f"reference_max must be 'largest_bon' or 'all_methods', not {reference_max!r}")
    low, high = runs["prompt_id"].map(r_min), runs["prompt_id"].map(r_max)
    span = (high - low).where(high > low)
    return 100.0 * (1.0 + (runs["score"] - low) / span)


def method_summary(
    runs: pd.DataFrame, by: Sequence[str] = (), reference_max: ReferenceMax = "largest_bon"
) -> pd.DataFrame:
    """One row per configuration (within each ``by`` group): Figure 3's points, Table 2's cells.

    Output columns: *by, method, n, alpha, method_label, n_prompts (prompts shared by all
    configurations of the group), mean_score, improvement (mean of ``per_prompt_improvement``
    over the prompts that can be normalised), n_prompts_improvement, compute_s (sum over
    prompts of shards × time_s), relative_compute (compute_s / compute_s of Bo-N_min),
    speedup_vs_largest_bon (compute_s of the largest BoN / compute_s), and perplexity (mean
    over prompts) when ``runs`` has that column.  Speedup is measured in compute, which equals
    wall-clock time when every shard count is 1.
    """
    require_columns(runs, [*RUN_COLUMNS, *by], "runs")
    _check_one_row_per_prompt(runs, by)
    return _for_each_group(runs, by, lambda group: _summarize_group(group, reference_max))


def bon_equivalent_compute(summary: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """The BoN compute that would reach each SR configuration's improvement score.

    Input: ``method_summary`` output.  Within each ``by`` group the BoN points, ordered by
    relative compute, form a curve; each SR point's improvement is located on it by
    ``interpolate_log_compute``.  Output: the SR rows with bon_equivalent_compute,
    bon_equivalent_status (see ``interpolate_log_compute``) and
    compute_speedup = bon_equivalent_compute / relative_compute (NaN outside the range).
    """
    require_columns(summary, [*by, "method", "relative_compute", "improvement"], "method summary")
    return _for_each_group(summary, by, _locate_sr_on_bon_curve)


def interpolate_log_compute(
    compute: Sequence[float], score: Sequence[float], target: float
) -> tuple[float, str]:
    """Compute at which a (compute, score) curve reaches ``target``, linear in log(compute).

    BoN's score grows roughly linearly in log N, so interpolating in log-compute is the
    natural reading of Figure 3's log-scaled axis.  The curve is walked in order of
    increasing compute and the first segment that reaches ``target`` is used, i.e. the
    cheapest BoN budget that matches it.  Returns (compute, "interpolated"), or
    (NaN, "below_range" / "above_range") when ``target`` lies outside the curve's scores —
    extrapolating a best-of-N curve is guesswork — or (NaN, "no_curve") without finite points.
    """
    log_x, y = np.log(np.asarray(compute, dtype=float)), np.asarray(score, dtype=float)
    usable = np.isfinite(log_x) & np.isfinite(y)
    order = np.argsort(log_x[usable])
    log_x, y = log_x[usable][order], y[usable][order]
    if not y.size:
        return math.nan, "no_curve"
    if not np.isfinite(target) or target < y.min():
        return math.nan, "below_range"
    if target > y.max():
        return math.nan, "above_range"
    if y[0] >= target:
        return float(np.exp(log_x[0])), "interpolated"
    # First point reaching the target; every point before it is below the target.
    reached = 1 + int(np.argmax(y[1:] >= target))
    before = reached - 1
    weight = (target - y[before]) / (y[reached] - y[before])
    return float(np.exp(log_x[before] + weight * (log_x[reached] - log_x[before]))), "interpolated"


def _summarize_group(runs: pd.DataFrame, reference_max: ReferenceMax) -> pd.DataFrame:
    if not (runs["method"] == "bon").any():
        raise ValueError("a group has no BoN configuration to normalise against")
    runs = _on_common_prompts(runs).assign(
        improvement=lambda frame: per_prompt_improvement(frame, reference_max),
        compute_s=lambda frame: frame["time_s"] * frame.get("shards", 1),
    )
    aggregations = {
        "n_prompts": ("prompt_id", "nunique"),
        "mean_score": ("score", "mean"),
        "improvement": ("improvement", "mean"),
        "n_prompts_improvement": ("improvement", "count"),
        "compute_s": ("compute_s", "sum"),
    }
    if "perplexity" in runs.columns:
        aggregations["perplexity"] = ("perplexity", "mean")
    summary = runs.groupby(CONFIG_COLUMNS, dropna=False, sort=False).agg(**aggregations).reset_index()
    bon = summary[summary["method"] == "bon"]
    smallest, largest = bon.loc[bon["n"].idxmin()], bon.loc[bon["n"].idxmax()]
    summary["relative_compute"] = summary["compute_s"] / smallest["compute_s"]
    summary["speedup_vs_largest_bon"] = largest["compute_s"] / summary["compute_s"]
    summary.insert(3, "method_label", [method_label(*row) for row in summary[CONFIG_COLUMNS].itertuples(index=False)])
    # BoN by N, then SR by alpha: the order of Figure 3's curves and the paper's tables.
    return summary.sort_values(["method", "n", "alpha"], ignore_index=True)


def _locate_sr_on_bon_curve(summary: pd.DataFrame) -> pd.DataFrame:
    bon = summary[summary["method"] == "bon"]
    sr = summary[summary["method"] == "sr"].copy()
    located = [
        interpolate_log_compute(bon["relative_compute"], bon["improvement"], target)
        for target in sr["improvement"]
    ]
    sr["bon_equivalent_compute"] = [compute for compute, _ in located]
    sr["bon_equivalent_status"] = [status for _, status in located]
    sr["compute_speedup"] = sr["bon_equivalent_compute"] / sr["relative_compute"]
    return sr.reset_index(drop=True)


def _on_common_prompts(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows of the prompts that every configuration in ``runs`` answered."""
    n_configs = len(runs[CONFIG_COLUMNS].drop_duplicates())
    configs_per_prompt = runs.groupby("prompt_id")["prompt_id"].transform("size")
    return runs[configs_per_prompt == n_configs]


def _scores_of(config_runs: pd.DataFrame) -> pd.Series:
    return config_runs.set_index("prompt_id")["score"]


def _check_one_row_per_prompt(runs: pd.DataFrame, by: Sequence[str]) -> None:
    duplicated = runs.duplicated([*by, *CONFIG_COLUMNS, "prompt_id"])
    if duplicated.any():
        example = runs.loc[duplicated, [*by, *CONFIG_COLUMNS, "prompt_id"]].iloc[0].to_dict()
        raise ValueError(f"runs has several rows for one configuration and prompt, e.g. {example}")


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
