"""One run file per method from the per-chunk files: concatenated in plan order, or, for
Best-of-N made of k shards, one record per prompt merged from its k shard records
(`specrej.records.shards.merge_shards`: the best response over the shards, compute = summed shard time)."""

import json
import sys

from specrej.methods import get_method
from specrej.records.shards import merge_shards, records_by_prompt

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
shards = int(snakemake.params.shards)  # noqa: F821
groups = records_by_prompt(snakemake.input)  # noqa: F821 (plan order; each file holds a prompt once)
# one record per prompt and shard: a prompt in two chunk files would be counted twice
wrong = {json.dumps(group[0]["prompt_id"]): len(group) for group in groups if len(group) != shards}
if wrong:
    sys.exit(f"expected {shards} record(s) per prompt (one per shard), got {wrong}")
records = [merge_shards(group, label=get_method(group[0]["method"]).label) if shards > 1 else group[0]
           for group in groups]
with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
print(f"{len(records)} records, {shards} shard(s) each, from {len(snakemake.input)} files",  # noqa: F821
      file=sys.stderr)
