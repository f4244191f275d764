"""Best-of-N's shards as one run: one prompt's records of k shards merged into one Best-of-N
record (`merge_shards`), and several run files' records grouped by prompt (`records_by_prompt`).
Torch-free."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

from .io import read_records
from .step_profile import merged as merged_steps


def records_by_prompt(paths: Iterable[str | os.PathLike]) -> list[list[dict]]:
    """The records of several run files grouped by prompt, in order of first appearance (each
    file is read with `read_records`, so none holds a prompt twice)."""
    groups: dict[str, list[dict]] = {}
    for path in paths:
        for record in read_records(path):
            groups.setdefault(json.dumps(record["prompt_id"]), []).append(record)
    return list(groups.values())


def merge_shards(records: list[dict], all_candidates: bool = False, label: Callable[[dict], str] | None = None) -> dict:
    """One Best-of-N record from the records of its k shards (the same prompt, distinct seeds).

    The paper runs Bo3840 as 32 GPUs x Bo120: the merged record keeps the best response over
    the shards, and only that candidate (its id renumbered shard * shard_size + id), and the
    lowest final score over all shards as `worst` (eq. 8 divides by the best minus the worst).
    With `all_candidates` every shard's candidates are kept, renumbered the same way: the pooled
    responses the correlation study reads (one large run, subsampled by shard).
    `params.shards` = k and `timing.total_s` is the mean shard time, so shards x total_s (the
    compute of `analysis.metrics`) is the summed shard time. A prompt that failed in any shard
    becomes an error record naming the shards' errors. `label`: the method's declared label of a
    setting's params (`Method.label`), which names the merged setting (None: it keeps no label).
    """
    first = records[0]
    params = {**first["params"], "n": sum(r["params"]["n"] for r in records), "shards": len(records),
              "shard_size": first["params"]["n"], "shard_seeds": [r["params"].get("seed") for r in records]}
    if "setting" in params:  # the merged run is Best-of-(total N)
        setting = params["setting"] = {**params["setting"], "params": {**params["setting"]["params"], "n": params["n"]}}
        if label is None:
            setting.pop("label", None)  # the shard's own would name the wrong N
        else:
            setting["label"] = label(setting["params"])
    base = {"prompt_id": first["prompt_id"], "prompt": first["prompt"], "method": first["method"], "params": params,
            **({"reference": first["reference"]} if "reference" in first else {})}
    errors = [f"shard {k}: {r['error']}" for k, r in enumerate(records) if "error" in r]
    if errors:
        return {**base, "error": "; ".join(errors)}
    answered = [(k, r) for k, r in enumerate(records) if r.get("best")]
    worsts = [r["worst"]["score"] for r in records if r.get("worst")]
    best_shard, best_record = max(answered, key=lambda kr: kr[1]["best"]["score"], default=(None, None))
    candidates, best = [], None
    if best_record is not None:
        offset = best_shard * params["shard_size"]
        best = {**best_record["best"], "candidate_id": best_record["best"]["candidate_id"] + offset}
        chosen = next(c for c in best_record["candidates"] if c["id"] == best_record["best"]["candidate_id"])
        candidates = [{**chosen, "id": chosen["id"] + offset}]
    if all_candidates:
        candidates = [{**c, "id": c["id"] + k * params["shard_size"]} for k, r in enumerate(records)
                      for c in r["candidates"]]

    def mean(key: str) -> float:
        return sum(r["timing"][key] for r in records) / len(records)

    return {
        **base,
        "best": best,
        "worst": {"score": min(worsts)} if worsts else None,  # eq. 8's min over all N candidates
        "candidates": candidates,
        "num_candidates": sum(len(r["candidates"]) for r in records),
        "rounds": [],
        "timing": {"total_s": mean("total_s"), "generate_s": mean("generate_s"), "score_s": mean("score_s"),
                   "shard_total_s": [r["timing"]["total_s"] for r in records], **_shard_compute(records)},
        "tokens": {key: sum(r["tokens"][key] for r in records) for key in ("generated", "scored")},
        "peak_kv_bytes": max(r["peak_kv_bytes"] for r in records),
        # each shard is its own device: the merged record keeps the worst shard's memory
        "measured_peak_bytes": max((r["measured_peak_bytes"] for r in records
                                    if r.get("measured_peak_bytes") is not None), default=None),
        "memory_margin_bytes": max(r.get("memory_margin_bytes", 0) for r in records),
        "retries": sum(r.get("retries", 0) for r in records),
        "flops": _summed_flops(records),
        **({"steps": steps} if (steps := merged_steps([r.get("steps") for r in records])) is not None else {}),
    }


def _shard_compute(records: list[dict]) -> dict:
    """The shards' mean `compute_s` (as `total_s`: shards x compute_s is their sum), its clock and
    threads when every shard has them and they agree; else nothing (an older shard: wall time only)."""
    timings = [r["timing"] for r in records]
    if any("compute_s" not in t for t in timings):
        return {}
    kept = {"compute_s": sum(t["compute_s"] for t in timings) / len(timings)}
    for key in ("compute_clock", "threads"):
        values = {t.get(key) for t in timings}
        kept[key] = values.pop() if len(values) == 1 else sorted(values, key=str)
    return kept


def _summed_flops(records: list[dict]) -> dict | None:
    """The shards' FLOP counts added up (None unless every shard has one)."""
    counts = [r.get("flops") for r in records]
    if not counts or any(c is None for c in counts):
        return None
    return {key: sum(c[key] for c in counts) for key in counts[0]}
