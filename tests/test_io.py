"""Trajectory files: merging Best-of-N shards into one record per prompt."""

from specrej.io import merge_shards


def shard_record(seed, scores, total_s, error=None):
    record = {"prompt_id": 7, "prompt": "p", "method": "bon",
              "params": {"n": len(scores), "seed": seed, "model": "m", "reward": "r"}}
    if error:
        return {**record, "error": error}
    candidates = [{"id": i, "text": f"s{seed}c{i}", "final_score": s} for i, s in enumerate(scores)]
    best = max(candidates, key=lambda c: c["final_score"])
    return {**record, "candidates": candidates, "rounds": [],
            "best": {"candidate_id": best["id"], "text": best["text"], "score": best["final_score"], "num_tokens": 3},
            "timing": {"total_s": total_s, "generate_s": total_s - 1, "score_s": 1.0},
            "tokens": {"generated": 10, "scored": 10}, "peak_kv_bytes": 100 * seed}


def test_merge_keeps_the_best_over_shards_and_sums_compute():
    merged = merge_shards([shard_record(1, [0.1, 0.5], 4.0), shard_record(2, [0.9, 0.2], 6.0)])
    assert merged["best"] == {"candidate_id": 2, "text": "s2c0", "score": 0.9, "num_tokens": 3}
    assert [c["id"] for c in merged["candidates"]] == [2]
    assert merged["params"]["n"] == 4 and merged["params"]["shards"] == 2 and merged["params"]["shard_seeds"] == [1, 2]
    assert merged["params"]["shards"] * merged["timing"]["total_s"] == 10.0  # summed shard time
    assert merged["tokens"] == {"generated": 20, "scored": 20} and merged["peak_kv_bytes"] == 200


def test_a_failed_shard_makes_an_error_record():
    merged = merge_shards([shard_record(1, [0.1], 1.0), shard_record(2, [], 1.0, error="empty prompt")])
    assert merged["error"] == "shard 1: empty prompt" and "best" not in merged
