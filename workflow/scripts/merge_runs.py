"""One run file per method from the per-chunk files: concatenated in plan order, or, for
Best-of-N made of k shards, one record per prompt merged from its k shard records
(`specrej.io.merge_shards`: the best response over the shards, compute = summed shard time)."""

import json
import sys
from collections import defaultdict

from specrej.io import merge_shards, read_records

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
shards = int(snakemake.params.shards)  # noqa: F821
records = [record for path in snakemake.input for record in read_records(path)]  # noqa: F821
if shards > 1:
    by_prompt = defaultdict(list)
    for record in records:
        by_prompt[json.dumps(record["prompt_id"])].append(record)
    incomplete = {pid: len(group) for pid, group in by_prompt.items() if len(group) != shards}
    if incomplete:
        sys.exit(f"expected {shards} shard records per prompt, got {incomplete}")
    records = [merge_shards(group) for group in by_prompt.values()]
with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
print(f"{len(records)} records, {shards} shard(s) each, from {len(snakemake.input)} files",  # noqa: F821
      file=sys.stderr)
