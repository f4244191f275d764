"""Trajectory files: merging Best-of-N shards into one record per prompt; a prompt written
twice is refused; the lock that keeps a second process off an output."""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from specrej.errors import SpecrejError
from specrej.records.io import RecordWriter, output_lock, read_records
from specrej.records.shards import merge_shards


def shard_record(seed, scores, total_s, error=None):
    record = {"prompt_id": 7, "prompt": "p", "method": "bon",
              "params": {"n": len(scores), "seed": seed, "model": "m", "reward": "r"}}
    if error:
        return {**record, "error": error}
    candidates = [{"id": i, "text": f"s{seed}c{i}", "final_score": s} for i, s in enumerate(scores)]
    best = max(candidates, key=lambda c: c["final_score"])
    worst = min(candidates, key=lambda c: c["final_score"])
    return {**record, "candidates": candidates, "rounds": [], "worst": {"candidate_id": worst["id"], "score": worst["final_score"]},
            "best": {"candidate_id": best["id"], "text": best["text"], "score": best["final_score"], "num_tokens": 3},
            "timing": {"total_s": total_s, "generate_s": total_s - 1, "score_s": 1.0},
            "tokens": {"generated": 10, "scored": 10}, "peak_kv_bytes": 100 * seed}


def test_merge_keeps_the_best_over_shards_and_sums_compute():
    merged = merge_shards([shard_record(1, [0.1, 0.5], 4.0), shard_record(2, [0.9, 0.2], 6.0)])
    assert merged["best"] == {"candidate_id": 2, "text": "s2c0", "score": 0.9, "num_tokens": 3}
    assert [c["id"] for c in merged["candidates"]] == [2]
    assert merged["worst"]["score"] == 0.1  # eq. 8's range spans every shard's candidates
    assert merged["params"]["n"] == 4 and merged["params"]["shards"] == 2 and merged["params"]["shard_seeds"] == [1, 2]
    assert merged["params"]["shards"] * merged["timing"]["total_s"] == 10.0  # summed shard time
    assert merged["tokens"] == {"generated": 20, "scored": 20} and merged["peak_kv_bytes"] == 200
    # memory per shard (one device each): the worst shard; retries add up; unmeasured stays None
    assert merged["measured_peak_bytes"] is None and merged["retries"] == 0
    measured = merge_shards([{**shard_record(1, [0.1], 1.0), "measured_peak_bytes": 300, "retries": 1},
                             {**shard_record(2, [0.2], 1.0), "measured_peak_bytes": 500, "retries": 0}])
    assert measured["measured_peak_bytes"] == 500 and measured["retries"] == 1


def test_a_failed_shard_makes_an_error_record():
    merged = merge_shards([shard_record(1, [0.1], 1.0), shard_record(2, [], 1.0, error="empty prompt")])
    assert merged["error"] == "shard 1: empty prompt" and "best" not in merged


def write_records(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_a_file_holding_a_prompt_twice_is_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    write_records(path, [{"prompt_id": 1, "error": "e"}, {"prompt_id": "1", "error": "e"}])  # two distinct ids
    assert len(read_records(path)) == 2
    write_records(path, [{"prompt_id": i, "error": "e"} for i in (0, 1, 0)])
    with pytest.raises(SpecrejError, match="holds prompt 0 twice: two runs wrote to it at once"):
        read_records(path)
    with pytest.raises(SpecrejError, match="holds prompt 0 twice"):
        RecordWriter(path, {})
    assert not Path(f"{path}.lock").exists()  # the refused writer let go of its lock


def lock_in_child(path) -> subprocess.CompletedProcess:
    code = "import sys\nfrom specrej.records.io import output_lock\nwith output_lock(sys.argv[1]):\n    pass"
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)


def test_output_lock_keeps_other_processes_out_and_cleans_up(tmp_path):
    out = tmp_path / "run.jsonl"
    with output_lock(out):
        assert Path(f"{out}.lock").read_text() == f"{os.getpid()}\n"
        child = lock_in_child(out)
        assert child.returncode == 1
        assert (f"another specrej process is writing {out} (pid {os.getpid()}); wait for it or choose another --out"
                in child.stderr)
    assert not Path(f"{out}.lock").exists()
    assert lock_in_child(out).returncode == 0


def test_a_lock_file_left_by_a_killed_process_does_not_block(tmp_path):
    out = tmp_path / "run.jsonl"
    Path(f"{out}.lock").write_text("99999\n")  # its flock went with the process; the file stayed
    with output_lock(out):
        assert Path(f"{out}.lock").read_text() == f"{os.getpid()}\n"


MERGE_RUNS = Path(__file__).parents[1] / "workflow" / "scripts" / "merge_runs.py"


def merge_runs(tmp_path, inputs, shards=1) -> list[dict]:
    out = tmp_path / "merged.jsonl"
    snakemake = SimpleNamespace(input=[str(p) for p in inputs], output=[str(out)], log=[str(tmp_path / "merge.log")],
                                params=SimpleNamespace(shards=shards))
    stderr = sys.stderr
    try:
        runpy.run_path(str(MERGE_RUNS), init_globals={"snakemake": snakemake})
    finally:
        if sys.stderr is not stderr:  # the script sends stderr to its log
            sys.stderr.close()
            sys.stderr = stderr
    return read_records(out)


def test_merge_runs_refuses_a_prompt_written_twice(tmp_path):
    first, second = tmp_path / "chunk0.jsonl", tmp_path / "chunk1.jsonl"
    write_records(first, [{"prompt_id": 0, "error": "e"}, {"prompt_id": 1, "error": "e"}])
    write_records(second, [{"prompt_id": 2, "error": "e"}])
    assert [r["prompt_id"] for r in merge_runs(tmp_path, [first, second])] == [0, 1, 2]
    write_records(second, [{"prompt_id": 1, "error": "e"}])  # in two chunk files
    with pytest.raises(SystemExit, match=r"expected 1 record\(s\) per prompt \(one per shard\), got \{'1': 2\}"):
        merge_runs(tmp_path, [first, second])
    write_records(second, [shard_record(2, [0.3], 1.0)] * 2)  # twice in one shard file
    with pytest.raises(SpecrejError, match="holds prompt 7 twice"):
        merge_runs(tmp_path, [second], shards=2)


def test_the_merged_setting_is_named_by_the_methods_own_label():
    """The shards' setting says n=2 each; the merged run's is n=4, labelled by the label it is given
    (the workflow passes the method's declared `Method.label`), in its place; without one it keeps none."""
    from specrej.methods import get_method

    setting = {"method": "bon", "params": {"n": 2}, "label": "Bo2", "display": {"name": "Best-of-N"}}
    shards = [shard_record(seed, [0.1, 0.2], 1.0) for seed in (1, 2)]
    for shard in shards:
        shard["params"] = {**shard["params"], "setting": setting}
    merged = merge_shards(shards, label=get_method("bon").label)["params"]["setting"]
    assert merged == {"method": "bon", "params": {"n": 4}, "label": "Bo4", "display": {"name": "Best-of-N"}}
    assert list(merged) == list(setting)  # the record's key order kept
    assert "label" not in merge_shards(shards)["params"]["setting"]
