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


def assert_summary_matches_the_run_files(results: Path) -> None:
    """results/metrics/summary.csv equals eq. 7 and eq. 8 recomputed here from the merged run files
    alone (plain Python over the JSONL records, not analysis.metrics), on the prompts every run of
    a pair answered: every method's run files, results/runs/<pair>/<method>/<setting>.jsonl (the
    shard and chunk files one folder further down are not runs of their own). relative_flops is
    checked the same way where every record counted its FLOPs, and must be empty where none did."""
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

        # eq. 7's numerator: shards x mean shard compute (CPU seconds) = summed shard compute; the same
        # in FLOPs (a merged record holds its shards' sum), None where a record has no count
        compute = {label: sum(by_prompt[p]["params"].get("shards", 1) * by_prompt[p]["timing"]["compute_s"]
                              for p in common) for label, by_prompt in runs.items()}
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
            mine, reference = flops[label], flops[bon_min]
            if mine is not None and reference:
                assert math.isclose(float(row["relative_flops"]), mine / reference, rel_tol=1e-9), label
            else:
                assert row["relative_flops"] in ("", "nan", "NaN"), (label, row["relative_flops"])
