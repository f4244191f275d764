"""One run file per method from the per-chunk files: concatenated in plan order, or, for
Best-of-N made of k shards, one record per prompt that merges its k shard records.

A merged Bo-N record keeps the best response over the shards and only that candidate (its id
renumbered shard * shard_size + id); `params.shards` = k and `timing.total_s` is the mean shard
time, so `shards x total_s` (analysis.metrics' compute) is the summed shard time: the paper's
count of N / shard_size GPUs running one shard each. A prompt that failed in any shard is an
error record naming the shards' errors.
"""

import json
import sys
from collections import defaultdict

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
shards = int(snakemake.params.shards)  # noqa: F821


def read(path):
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def merge(records):
    first = records[0]
    params = {**first["params"], "n": sum(r["params"]["n"] for r in records), "shards": len(records),
              "shard_size": first["params"]["n"], "shard_seeds": [r["params"].get("seed") for r in records]}
    base = {"prompt_id": first["prompt_id"], "prompt": first["prompt"], "method": first["method"], "params": params}
    errors = [f"shard {k}: {r['error']}" for k, r in enumerate(records) if "error" in r]
    if errors:
        return {**base, "error": "; ".join(errors)}
    answered = [(k, r) for k, r in enumerate(records) if r.get("best")]
    best_shard, best_record = max(answered, key=lambda kr: kr[1]["best"]["score"], default=(None, None))
    candidates, best = [], None
    if best_record is not None:
        offset = best_shard * params["shard_size"]
        best = {**best_record["best"], "candidate_id": best_record["best"]["candidate_id"] + offset}
        chosen = next(c for c in best_record["candidates"] if c["id"] == best_record["best"]["candidate_id"])
        candidates = [{**chosen, "id": chosen["id"] + offset}]
    mean = lambda key: sum(r["timing"][key] for r in records) / len(records)  # noqa: E731
    return {
        **base,
        "best": best,
        "candidates": candidates,
        "num_candidates": sum(len(r["candidates"]) for r in records),
        "rounds": [],
        "timing": {"total_s": mean("total_s"), "generate_s": mean("generate_s"), "score_s": mean("score_s"),
                   "shard_total_s": [r["timing"]["total_s"] for r in records]},
        "tokens": {key: sum(r["tokens"][key] for r in records) for key in ("generated", "scored")},
        "peak_kv_bytes": max(r["peak_kv_bytes"] for r in records),
    }


records = [record for path in snakemake.input for record in read(path)]  # noqa: F821
if shards > 1:
    by_prompt = defaultdict(list)
    for record in records:
        by_prompt[json.dumps(record["prompt_id"])].append(record)
    incomplete = {pid: len(group) for pid, group in by_prompt.items() if len(group) != shards}
    if incomplete:
        sys.exit(f"expected {shards} shard records per prompt, got {incomplete}")
    records = [merge(group) for group in by_prompt.values()]
with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
print(f"{len(records)} records, {shards} shard(s) each, from {len(snakemake.input)} files",  # noqa: F821
      file=sys.stderr)
