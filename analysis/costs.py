"""A study's compute as another calibration costs the same steps: every setting's relative compute
and its speedup at equal score, each record's recorded steps costed on CALIBRATION (another
machine's `specrej calibrate --out`, or a roofline estimate: `specrej calibrate --roofline`),
beside what the study itself reported (results/metrics/summary.csv and bon_equivalent.csv).

    python -m analysis.costs --calibration FILE RESULTS_DIR [--out FILE.csv]

The run files are those RESULTS_DIR/metrics/runs.csv lists (the study's own analysis ran first);
the bootstrap is the study's (tables: resamples, seed, confidence), so only the compute differs;
where the calibration keeps its repeats, the intervals hold those on each repeat alone, as the study's.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from analysis.bon_curve import bon_equivalent_compute
from analysis.io import best_responses_frame, load_trajectories
from analysis.metrics import bootstrap_draws, method_summary
from analysis.modelled_compute import (calibration_label, load_calibration, repeat_calibrations, widened_by_repeats,
                                      with_eq7_compute)
from analysis.tables import format_ratio

BY = ["pair_key", "pair", "generator", "reward"]
REPEAT_KEYS = ["pair_key", "method_label"]
OUTSIDE = {"above_range": "above the largest Best-of-N", "below_range": "below Bo-N_min"}


def costed_runs(runs_table: pd.DataFrame, calibration: dict, study_dir: Path = Path(".")) -> pd.DataFrame:
    """The runs frame of the run files `runs_table` (results/metrics/runs.csv) lists, relative to
    `study_dir` (the folder the study ran in), eq. 7's compute their steps on `calibration`."""
    meta = runs_table.drop_duplicates("run").set_index("run")[[c for c in BY if c in runs_table.columns]]
    missing = [path for path in meta.index if not (study_dir / path).is_file()]
    if missing:
        raise FileNotFoundError(2, "not found", str(study_dir / missing[0]))
    frames = [best_responses_frame(load_trajectories(study_dir / path), calibration).assign(run=path, **meta.loc[path].to_dict())
              for path in meta.index]
    return with_eq7_compute(pd.concat(frames, ignore_index=True), "modelled")


def costed_summary(runs: pd.DataFrame, resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
                   by_repeat: list[pd.DataFrame] = ()) -> pd.DataFrame:
    """Per configuration: relative compute with its interval and, for the methods, the speedup at
    equal score; the intervals widened to hold those of the same runs costed on each of the
    calibration's repeats (`by_repeat`, as the study's own summary)."""
    def located_summary(costed):
        summary = method_summary(costed, by=BY, n_resamples=resamples, confidence_level=confidence, seed=seed)
        draws = bootstrap_draws(costed, by=BY, n_resamples=resamples, seed=seed)
        return summary, bon_equivalent_compute(summary, by=BY, draws=draws, confidence_level=confidence)

    summary, located = located_summary(runs)
    repeats = [located_summary(costed) for costed in by_repeat]
    summary = widened_by_repeats(summary, [s for s, _ in repeats], REPEAT_KEYS)
    located = widened_by_repeats(located, [l for _, l in repeats], REPEAT_KEYS)
    speedups = located.set_index(["pair", "method_label"])[["compute_speedup", "compute_speedup_lo",
                                                            "compute_speedup_hi", "bon_equivalent_status"]]
    return summary.join(speedups, on=["pair", "method_label"])


def comparison(costed: pd.DataFrame, reported: pd.DataFrame | None) -> pd.DataFrame:
    """One row per pair and setting: relative compute and speedup on the calibration, and as reported."""
    columns = ["pair", "method_label", "improvement", "relative_compute", "relative_compute_lo", "relative_compute_hi",
               "compute_speedup", "compute_speedup_lo", "compute_speedup_hi", "bon_equivalent_status"]
    table = costed[columns].copy()
    if reported is not None:
        kept = reported.set_index(["pair", "method_label"])
        for column in ("relative_compute", "compute_speedup"):
            if column in kept.columns:
                table[f"reported_{column}"] = [kept[column].get(key, float("nan")) for key in
                                               zip(table["pair"], table["method_label"])]
    return table


def _reported(results: Path) -> pd.DataFrame | None:
    summary_path, located_path = results / "metrics" / "summary.csv", results / "metrics" / "bon_equivalent.csv"
    if not summary_path.is_file():
        return None
    summary = pd.read_csv(summary_path)[["pair", "method_label", "relative_compute"]]
    if located_path.is_file():
        located = pd.read_csv(located_path)[["pair", "method_label", "compute_speedup"]]
        summary = summary.merge(located, on=["pair", "method_label"], how="left")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.costs", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("results", metavar="RESULTS_DIR", type=Path, help="a study's results folder (results/)")
    parser.add_argument("--calibration", required=True, metavar="FILE",
                        help="a calibration: specrej calibrate --out FILE, or --roofline")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000, the study's)")
    parser.add_argument("--out", metavar="FILE", help="also write the table as CSV")
    args = parser.parse_args(argv)
    runs_path = args.results / "metrics" / "runs.csv"
    try:
        calibration = load_calibration(args.calibration)
        runs_table = pd.read_csv(runs_path, dtype={"prompt_id": str})
        # runs.csv names the run files from the folder the study ran in: the results folder's parent
        # where it is not the current one
        study_dir = Path(".") if all(Path(p).is_file() for p in runs_table["run"].unique()) else args.results.parent
        repeats = [costed_runs(runs_table, repeat, study_dir) for repeat in repeat_calibrations(calibration)]
        table = comparison(costed_summary(costed_runs(runs_table, calibration, study_dir), args.resamples,
                                          by_repeat=repeats), _reported(args.results))
    except FileNotFoundError as error:
        print(f"analysis.costs: error: {error.filename} not found (run the study's analysis first: "
              f"{runs_path} lists its run files, from the folder the study ran in)", file=sys.stderr)
        return 2
    except (ValueError, KeyError) as error:
        print(f"analysis.costs: error: {error}", file=sys.stderr)
        return 2
    print(f"Costed on: {calibration_label(calibration)}")
    for pair, rows in table.groupby("pair", sort=False):
        print(f"\n{pair}\n{'setting':<28} {'score':>7} {'compute (x Bo-N_min)':>26} {'speedup at equal score':>28}"
              f"{'   reported compute / speedup' if 'reported_relative_compute' in rows else ''}")
        for row in rows.itertuples():
            compute = f"{format_ratio(row.relative_compute)} [{format_ratio(row.relative_compute_lo)}, " \
                      f"{format_ratio(row.relative_compute_hi)}]"
            speedup = OUTSIDE.get(row.bon_equivalent_status, "") if pd.isna(row.compute_speedup) else \
                f"{format_ratio(row.compute_speedup)}x [{format_ratio(row.compute_speedup_lo)}, " \
                f"{format_ratio(row.compute_speedup_hi)}]"
            reported = ""
            if "reported_relative_compute" in rows:
                reported = f"   {format_ratio(row.reported_relative_compute)} / " + \
                    ("" if pd.isna(row.reported_compute_speedup) else f"{format_ratio(row.reported_compute_speedup)}x")
            print(f"{row.method_label:<28} {row.improvement:>7.1f} {compute:>26} {speedup:>28}{reported}")
    if args.out:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
