"""Checks shared by the workflow tests (local cores and SLURM)."""

from pathlib import Path


def assert_tables_and_figures(results: Path) -> None:
    """Every table in CSV/Markdown/LaTeX and every figure in PNG/PDF exists and is not empty."""
    for stem in ("table1", "table2"):
        for ext in ("csv", "md", "tex"):
            assert (results / "tables" / f"{stem}.{ext}").stat().st_size > 0
    for stem in ("figure2", "figure3", "figure4"):
        for ext in ("png", "pdf"):
            assert (results / "figures" / f"{stem}.{ext}").stat().st_size > 1000


def run_file_label(records: list) -> str:
    """The label of a run file's configuration, from its records alone (plain Python, not
    analysis.io): Best-of-N "Bo<params.n>" (a merged file's n is the total over its shards), else
    the label the engine recorded in params.setting, else (files older than settings) "SR δ=<d>"
    for SR with the adaptive rule and "SR α=<a>" for SR."""
    labels = set()
    for record in records:
        params = record.get("params") or {}
        setting = params.get("setting")
        method = setting["method"] if setting else record["method"]
        if method == "bon":
            labels.add(f"Bo{params['n']}")
        elif setting:
            labels.add(setting["label"])
        elif (params.get("rejection") or {}).get("rule") == "adaptive":
            labels.add(f"SR δ={float(params['rejection']['delta']):g}")
        else:
            labels.add(f"SR α={float(params['alpha']):g}")
    assert len(labels) == 1, labels  # one configuration per run file
    return labels.pop()


def _linear(x: float, xs: list, ys: list) -> float:
    """Piecewise-linear through (xs, ys), extended linearly past either end."""
    if len(xs) == 1:
        return ys[0]
    i = 0 if x <= xs[0] else len(xs) - 2 if x >= xs[-1] else next(k for k in range(len(xs) - 1) if xs[k] <= x <= xs[k + 1])
    return ys[i] + (x - xs[i]) * (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])


def steps_seconds(steps: dict, calibration: dict) -> float:
    """A record's steps costed on a calibration, step by step in plain Python: each prefill at its
    length, each step's sampler at its rows sampled and (when rows were fed) its forward at its rows
    fed, linear in rows, then in the context; each scored response at its length."""
    seconds = sum(_linear(p, calibration["prefill"]["tokens"], calibration["prefill"]["seconds"])
                  for p in steps["prefill"])
    for rows_sampled, rows_fed, first, count, variant in steps["decode"]:
        parts = variant.split("+")
        forward = calibration["forward"]["layer-states" if "layer-states" in parts else "plain"]
        sample = calibration["sample"]["+".join(p for p in parts if p != "layer-states")]
        for context in range(first, first + count):
            seconds += _linear(rows_sampled, sample["rows"], sample["seconds"])
            if rows_fed:
                at_rows = [_linear(rows_fed, forward["rows"], [row[j] for row in forward["seconds"]])
                           for j in range(len(forward["contexts"]))]
                seconds += _linear(context, forward["contexts"], at_rows)
    if calibration.get("score"):
        seconds += sum(n * _linear(length, calibration["score"]["tokens"], calibration["score"]["seconds"])
                       for length, n in steps["scored"])
    return seconds


def assert_summary_matches_the_run_files(results: Path) -> None:
    """results/metrics/summary.csv equals eq. 7 and eq. 8 recomputed here from the merged run files
    alone (plain Python over the JSONL records, not analysis.metrics), on the prompts every run of
    a pair answered: every method's run files, results/runs/<pair>/<method>/<setting>.jsonl (the
    shard and chunk files one folder further down are not runs of their own). relative_flops is
    checked the same way where every record counted its FLOPs, and must be empty where none did.
    Under modelled compute (a results/calibration/<pair>.json), relative_compute is each record's
    steps costed on it (``steps_seconds``) and relative_cpu the measured seconds."""
    import csv
    import json
    import math

    with open(results / "metrics/summary.csv", newline="", encoding="utf-8") as handle:
        summary = list(csv.DictReader(handle))
    for pair_dir in sorted((results / "runs").iterdir()):
        runs, bon_n = {}, {}  # label -> {prompt_id: record}; Best-of-N label -> N
        for path in sorted(pair_dir.glob("*/*.jsonl")):
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if not records:
                continue
            label = run_file_label(records)
            assert label not in runs, (label, path)  # two run files of one configuration
            runs[label] = {json.dumps(r["prompt_id"]): r for r in records if "error" not in r and r.get("best")}
            first = records[0]
            if ((first.get("params") or {}).get("setting") or {}).get("method", first["method"]) == "bon":
                bon_n[label] = first["params"]["n"]
        assert bon_n, f"{pair_dir}: no Best-of-N run file"
        common = set.intersection(*(set(by_prompt) for by_prompt in runs.values()))
        bon_min = min(bon_n, key=bon_n.get)
        top = {p: runs[bon_min][p]["best"]["score"] for p in common}
        bottom = {p: runs[bon_min][p]["worst"]["score"] for p in common}

        # the measured CPU seconds: shards x mean shard compute = summed shard compute; the same in
        # FLOPs (a merged record holds its shards' sum), None where a record has no count
        measured = {label: sum(by_prompt[p]["params"].get("shards", 1) * by_prompt[p]["timing"]["compute_s"]
                               for p in common) for label, by_prompt in runs.items()}
        # eq. 7's numerator: modelled (each record's steps, a merged record's of every shard, on the
        # pair's calibration) where the study has one, else the measured seconds
        calibration_file = results / "calibration" / f"{pair_dir.name}.json"
        if calibration_file.is_file():
            calibration = json.loads(calibration_file.read_text())
            compute = {label: sum(steps_seconds(by_prompt[p]["steps"], calibration) for p in common)
                       for label, by_prompt in runs.items()}
        else:
            compute = measured
        counts = {label: [(by_prompt[p].get("flops") or {}).get("total") for p in common]
                  for label, by_prompt in runs.items()}
        flops = {label: None if None in c else sum(c) for label, c in counts.items()}

        rows = {row["method_label"]: row for row in summary if row["pair_key"] == pair_dir.name}
        assert set(rows) == set(runs), (set(rows), set(runs))
        for label, by_prompt in runs.items():
            scored = [p for p in common if top[p] > bottom[p]]
            eq8 = sum(100 * (1 - (top[p] - by_prompt[p]["best"]["score"]) / (top[p] - bottom[p]))
                      for p in scored) / len(scored)
            row = rows[label]
            assert int(row["n_prompts"]) == len(common) and int(row["n_prompts_improvement"]) == len(scored)
            assert math.isclose(float(row["improvement"]), eq8, rel_tol=1e-9), (label, row["improvement"], eq8)
            assert math.isclose(float(row["relative_compute"]), compute[label] / compute[bon_min], rel_tol=1e-9)
            if compute is not measured:  # the measured seconds beside the modelled ones
                assert math.isclose(float(row["relative_cpu"]), measured[label] / measured[bon_min], rel_tol=1e-9)
            mine, reference = flops[label], flops[bon_min]
            if mine is not None and reference:
                assert math.isclose(float(row["relative_flops"]), mine / reference, rel_tol=1e-9), label
            else:
                assert row["relative_flops"] in ("", "nan", "NaN"), (label, row["relative_flops"])
