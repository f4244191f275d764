"""Eq. 7's compute modelled from the records' steps (``specrej.records.step_profile``), beside the
measured CPU seconds as a check: the calibration files, and how far each run file's measured
seconds lie from what its steps cost on the calibration."""

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

# measured / modelled outside this range: the method does work the model does not see, or the
# machine was disturbed while it ran (the summary says so in one line)
CHECK_RANGE = (0.8, 1.25)
COMPUTE_MEASURES = ("modelled", "work", "wall", "flops")


def load_calibration(path: str | Path) -> dict:
    """A calibration (``specrej calibrate --out``, or a roofline estimate), checked for its tables."""
    calibration = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = [key for key in ("forward", "sample", "prefill") if key not in calibration]
    if missing:
        raise ValueError(f"{path} is not a calibration (no {', '.join(missing)}): make one with specrej calibrate")
    return calibration


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
    return (f"Modelled on this machine's calibration ({labels}), measured alone, as the paper's dedicated GPU: "
            "the same numbers on every rerun of these records. The measured CPU seconds beside it are the jobs' "
            "own, two at a time, where a neighbour slows small steps more than large ones "
            "(benchmarks/pairing_bias.py). " + check_sentence(check))


def calibration_label(calibration: Mapping) -> str:
    """How a page names a calibration: its CPU (or the estimate), date and condition."""
    if calibration.get("estimate"):
        return calibration.get("condition", "a roofline estimate")
    run = calibration.get("run", {})
    date = str(calibration.get("measured_at", ""))[:10]
    return (f"{calibration.get('cpu', 'unknown CPU')}, {run.get('threads', '?')} thread(s), "
            f"{'compiled' if run.get('compiled') else 'eager'}, {calibration.get('condition', '')}, {date}")
