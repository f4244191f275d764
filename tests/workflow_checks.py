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


def assert_summary_matches_the_run_files(results: Path) -> None:
    """results/metrics/summary.csv equals eq. 7 and eq. 8 recomputed here from the merged run files
    alone (plain Python over the JSONL records, not analysis.metrics), on the prompts every run of
    a pair answered."""
    import csv
    import json
    import math

    with open(results / "metrics/summary.csv", newline="", encoding="utf-8") as handle:
        summary = list(csv.DictReader(handle))
    for pair_dir in sorted((results / "runs").iterdir()):
        runs = {}  # label -> {prompt_id: record}
        paths = sorted(pair_dir.glob("bon/n*.jsonl")) + sorted(pair_dir.glob("sr/alpha*.jsonl")) + sorted(
            pair_dir.glob("sr/delta*.jsonl"))  # adaptive SR, by the file name (sr/delta<D>.jsonl)
        for path in paths:
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            label = (f"Bo{path.stem[1:]}" if path.parent.name == "bon" else
                     f"SR α={float(path.stem[5:]):g}" if path.stem.startswith("alpha") else f"SR δ={float(path.stem[5:]):g}")
            runs[label] = {json.dumps(r["prompt_id"]): r for r in records if "error" not in r and r.get("best")}
        common = set.intersection(*(set(by_prompt) for by_prompt in runs.values()))
        bon_min = min((label for label in runs if label.startswith("Bo")), key=lambda label: int(label[2:]))
        top = {p: runs[bon_min][p]["best"]["score"] for p in common}
        bottom = {p: runs[bon_min][p]["worst"]["score"] for p in common}

        def compute(label):  # eq. 7's numerator: shards x mean shard time = summed shard time
            return sum(r["params"].get("shards", 1) * r["timing"]["total_s"] for p, r in runs[label].items()
                       if p in common)

        rows = {row["method_label"]: row for row in summary if row["pair_key"] == pair_dir.name}
        assert set(rows) == set(runs), (set(rows), set(runs))
        for label, by_prompt in runs.items():
            scored = [p for p in common if top[p] > bottom[p]]
            eq8 = sum(100 * (1 - (top[p] - by_prompt[p]["best"]["score"]) / (top[p] - bottom[p]))
                      for p in scored) / len(scored)
            row = rows[label]
            assert int(row["n_prompts"]) == len(common) and int(row["n_prompts_improvement"]) == len(scored)
            assert math.isclose(float(row["improvement"]), eq8, rel_tol=1e-9), (label, row["improvement"], eq8)
            assert math.isclose(float(row["relative_compute"]), compute(label) / compute(bon_min), rel_tol=1e-9)
