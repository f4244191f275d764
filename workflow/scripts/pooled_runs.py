"""Best-of-N records with every candidate, for the accuracy study's scripts: a merged Best-of-N
run keeps only its best candidate, and a vote needs them all.

`pooled_records(files, shards)`: with shards > 1, the shard files of each chunk pooled per prompt
(`specrej.records.shards.merge_shards(..., all_candidates=True)`: candidate ids shard * shard_size +
id, as score_prefixes numbers them for the correlation study's prefix table); with one, the
records of the files as they are (a direct run keeps every candidate)."""

from specrej.methods import get_method
from specrej.records.io import read_records
from specrej.records.shards import merge_shards, records_by_prompt


def pooled_records(files: list[str], shards: int) -> list[dict]:
    if shards == 1:
        return [record for path in files for record in read_records(path)]
    # files chunk by chunk, shards in order within a chunk: each prompt's group is in shard order
    return [merge_shards(group, all_candidates=True, label=get_method(group[0]["method"]).label)
            for group in records_by_prompt(files)]
