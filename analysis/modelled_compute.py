"""Eq. 7's compute modelled from the records' steps (``specrej.records.step_profile``), beside the
measured CPU seconds as a check: the calibration files, and how far each run file's measured
seconds lie from what its steps cost on the calibration. A calibration's repeats, each taken alone
(``repeat_calibrations``), cost the same steps again: the intervals of what eq. 7's compute gives
are widened to hold theirs (``widened_by_repeats``), so they cover the calibration's noise as well
as the prompts'."""

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

# measured / modelled outside this range: the method does work the model does not see, or the
# machine was disturbed while it ran (the summary says so in one line)
CHECK_RANGE = (0.8, 1.25)
COMPUTE_MEASURES = ("modelled", "work", "wall", "flops")
REPEAT_COLUMN = "modelled_s_repeat{}"  # runs.csv: each record's steps costed on the calibration's k-th repeat
# what eq. 7's compute gives, each with its interval (<name>_lo, <name>_hi): summary.csv's, bon_equivalent.csv's
MODELLED_ESTIMATES = ("relative_compute", "speedup_vs_largest_bon", "bon_equivalent_compute", "compute_speedup")


def load_calibration(path: str | Path) -> dict:
    """A calibration (``specrej calibrate --out``, or a roofline estimate), checked for its tables."""
    calibration = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = [key for key in ("forward", "sample", "prefill") if key not in calibration]
    if missing:
        raise ValueError(f"{path} is not a calibration (no {', '.join(missing)}): make one with specrej calibrate")
    return calibration


def repeat_calibrations(calibration: Mapping) -> list[dict]:
    """`calibration` once per repeat, each point's seconds that repeat's alone (its tables'
    ``by_repeat``); none where a table does not keep its repeats (a roofline estimate, an older file)."""
    tables = [*calibration["forward"].values(), *calibration["sample"].values(), calibration["prefill"]]
    tables += [calibration["score"]] if calibration.get("score") else []
    if not all("by_repeat" in table for table in tables):
        return []

    def nth(values, k):
        return [nth(v, k) for v in values] if isinstance(values[0], list) and isinstance(values[0][0], list) \
            else [v[k] for v in values]

    def table_at(table, k):
        return {**table, "seconds": nth(table["by_repeat"], k)}

    return [{**calibration,
             "forward": {name: table_at(t, k) for name, t in calibration["forward"].items()},
             "sample": {name: table_at(t, k) for name, t in calibration["sample"].items()},
             "prefill": table_at(calibration["prefill"], k),
             **({"score": table_at(calibration["score"], k)} if calibration.get("score") else {})}
            for k in range(int(calibration["repeats"]))]


def widened_by_repeats(table: pd.DataFrame, by_repeat: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    """`table` (summary.csv or bon_equivalent.csv rows, eq. 7's compute on the calibration's medians)
    with each interval of ``MODELLED_ESTIMATES`` widened to hold the same interval in every table of
    `by_repeat` (the same rows, costed on one repeat each), an ``_is_bound`` end a bound where any
    was, and ``<name>_repeats_lo`` / ``_repeats_hi``: the least and largest estimate over the repeats."""
    if not by_repeat:
        return table
    out = table.reset_index(drop=True)
    at = pd.MultiIndex.from_frame(out[keys]) if len(keys) > 1 else pd.Index(out[keys[0]])
    indexed = [other.set_index(keys) for other in by_repeat]

    def side_by_side(column: str, with_own: bool = True) -> pd.DataFrame:
        """`column` of each repeat's table on `out`'s rows (and `out`'s own first), one column each."""
        own = [out[column]] if with_own else []
        return pd.concat(own + [other[column].reindex(at).reset_index(drop=True) for other in indexed], axis=1)

    for name in (n for n in MODELLED_ESTIMATES if n in out.columns):
        estimates = side_by_side(name, with_own=False)
        out[f"{name}_repeats_lo"], out[f"{name}_repeats_hi"] = estimates.min(axis=1).values, estimates.max(axis=1).values
        for column, pick in ((f"{name}_lo", "min"), (f"{name}_hi", "max")):
            if column in out.columns:
                out[column] = getattr(side_by_side(column), pick)(axis=1).values
            if f"{column}_is_bound" in out.columns:
                out[f"{column}_is_bound"] = side_by_side(f"{column}_is_bound").fillna(False).astype(bool).any(axis=1).values
    return out


def with_eq7_compute(runs: pd.DataFrame, compute: str) -> pd.DataFrame:
    """``runs`` with ``work_s``, the seconds eq. 7 counts, from `compute` (``COMPUTE_MEASURES``):
    modelled_s for "modelled" (every row must have it; cpu_s, the measured seconds, stays beside
    it), else the measured seconds as recorded (work, and wall and flops, which ``analysis.metrics``
    reads from their own columns), with no cpu_s beside them."""
    if compute not in COMPUTE_MEASURES:
        raise ValueError(f"compute must be one of {', '.join(COMPUTE_MEASURES)}, not {compute!r}")
    if compute != "modelled":  # the measured seconds are eq. 7's own: no second column of them
        return runs.assign(cpu_s=float("nan"))
    missing = runs["modelled_s"].isna()
    if missing.any():
        example = runs.loc[missing].iloc[0]
        raise ValueError(f"{int(missing.sum())} of {len(runs)} runs have no modelled compute (e.g. prompt "
                         f"{example['prompt_id']} of {example['method_label']}): their records have no step profile "
                         "(made before it was recorded: rerun them) or no calibration was given")
    return runs.assign(work_s=runs["modelled_s"])


def compute_check(runs: pd.DataFrame, by: tuple[str, ...] = ("run",)) -> pd.DataFrame:
    """Per group (a run file): the measured seconds (cpu_s), the modelled ones (modelled_s), both
    summed over prompts and shards, their ratio measured / modelled, and ``outside`` (the ratio
    outside ``CHECK_RANGE``)."""
    by = list(by)
    shards = runs["shards"] if "shards" in runs.columns else 1
    totals = runs.assign(cpu_s=runs["cpu_s"] * shards, modelled_s=runs["modelled_s"] * shards)
    extra = [c for c in ("pair", "method_label") if c in runs.columns and c not in by]
    table = totals.groupby(by, sort=False).agg(**{c: (c, "first") for c in extra}, prompts=("prompt_id", "size"),
                                               cpu_s=("cpu_s", "sum"), modelled_s=("modelled_s", "sum")).reset_index()
    table["ratio"] = table["cpu_s"] / table["modelled_s"]
    table["outside"] = ~table["ratio"].between(*CHECK_RANGE)
    return table


def check_sentence(check: pd.DataFrame) -> str:
    """One line on the check: every run file inside the range, or which lie outside it."""
    low, high = CHECK_RANGE
    if check.empty or check["ratio"].isna().all():
        return ""
    span = f"{check['ratio'].min():.2f}-{check['ratio'].max():.2f}"
    outside = check[check["outside"]]
    if outside.empty:
        return f"Measured / modelled compute per run file: {span}, all inside [{low}, {high}]."
    named = ", ".join(f"{row.method_label} {row.ratio:.2f}" for row in outside.itertuples())
    return (f"Measured / modelled compute per run file: {span}; outside [{low}, {high}]: {named} (work the "
            "calibration does not see, or a disturbed machine).")


def compute_note(calibrations: list[Mapping], check: pd.DataFrame) -> str:
    """The summary's words on a modelled eq. 7: what it was costed on, why that column, the check."""
    labels = ", ".join(dict.fromkeys(calibration_label(c) for c in calibrations))
    repeats = sorted({len(repeat_calibrations(c)) for c in calibrations})
    widened = (f" Its intervals hold the prompts' bootstrap on the calibration's medians and on each of its "
               f"{'/'.join(map(str, repeats))} repeats alone (the calibration's own noise)." if repeats and repeats[0] else "")
    return (f"Modelled on this machine's calibration ({labels}), measured alone, as the paper's dedicated GPU: "
            f"the same numbers on every rerun of these records.{widened} The measured CPU seconds beside it are the "
            "jobs' own, two at a time, where a neighbour slows small steps more than large ones "
            "(benchmarks/pairing_bias.py). " + check_sentence(check))


def calibration_label(calibration: Mapping) -> str:
    """How a page names a calibration: its CPU (or the estimate), date and condition."""
    if calibration.get("estimate"):
        return calibration.get("condition", "a roofline estimate")
    run = calibration.get("run", {})
    date = str(calibration.get("measured_at", ""))[:10]
    return (f"{calibration.get('cpu', 'unknown CPU')}, {run.get('threads', '?')} thread(s), "
            f"{'compiled' if run.get('compiled') else 'eager'}, {calibration.get('condition', '')}, {date}")
