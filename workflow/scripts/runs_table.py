"""results/metrics/runs.csv (one row per run file and answered prompt) and
results/failed_prompts.csv (one row per run file and prompt without an answer: an error record,
or no complete response), with the run's setting label (`method_label`) and `run_answered`, the
prompts that run answered: 0 marks a method setting that completed no response at all, which the
tables show as such (analysis.tables.unanswered_runs). Labels (pair, generator, reward) are the
config's display names. eq. 7's compute (`work_s`) is what figures.figure3.compute names: with
"modelled", each record's steps costed on its pair's calibration (results/calibration/<pair>.json),
the measured CPU seconds kept beside it (`cpu_s`), and on each of the calibration's repeats alone
(`modelled_s_repeat1`, ..., which widen the intervals: method_summary); results/metrics/compute_check.csv
gives each run file's measured / modelled ratio."""

import sys
from pathlib import Path

import pandas as pd

from analysis.io import best_responses_frame, failed_prompts, load_trajectories, record_configuration
from analysis.modelled_compute import (REPEAT_COLUMN, compute_check, load_calibration, repeat_calibrations,
                                      with_eq7_compute)

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
meta = snakemake.params.meta  # noqa: F821
compute = snakemake.params.compute  # noqa: F821
calibrations = {Path(path).stem: load_calibration(path) for path in snakemake.input.calibrations}  # noqa: F821


def setting_label(record: dict) -> str | None:
    """The record's setting label, or its method where an error record names no setting."""
    try:
        return record_configuration(record)[3]
    except (KeyError, TypeError, AttributeError, ValueError):
        return (record.get("params") or {}).get("method") or record.get("method")


runs, failed = [], []
for path in snakemake.input.runs:  # noqa: F821
    records = load_trajectories(path)
    calibration = calibrations.get(meta[path]["pair_key"])
    answered = best_responses_frame(records, calibration)
    if compute == "modelled" and calibration is not None:
        for k, repeat in enumerate(repeat_calibrations(calibration), start=1):
            answered[REPEAT_COLUMN.format(k)] = best_responses_frame(records, repeat)["modelled_s"].values
    runs.append(answered.assign(run=path, **meta[path]))
    failures = failed_prompts(records)
    labels = [setting_label(r) for r in records if "error" in r or r.get("best") is None]
    failed.append(failures.assign(run=path, method_label=labels, run_answered=len(answered), **meta[path]))
    for row in failures.itertuples():
        print(f"FAILED {path} prompt {row.prompt_id}: {row.error}", file=sys.stderr)

runs = with_eq7_compute(pd.concat(runs, ignore_index=True), compute)
runs.to_csv(snakemake.output.runs, index=False)  # noqa: F821
compute_check(runs).to_csv(snakemake.output.compute_check, index=False)  # noqa: F821
columns = ["pair", "generator", "reward", "run", "prompt_id", "method", "method_label", "run_answered", "error"]
failed = pd.concat(failed, ignore_index=True) if failed else pd.DataFrame(columns=columns)
failed[columns].to_csv(snakemake.output.failed, index=False)  # noqa: F821
