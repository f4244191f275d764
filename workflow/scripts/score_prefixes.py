"""`specrej score-prefixes` on one chunk of Best-of-N responses (params.args: workflow/job_options.py
prefix_args).

Several shard files are pooled per prompt first (`merge_shards(..., all_candidates=True)`:
candidate ids renumbered shard * shard_size + id). A chunk whose every prompt failed has nothing
to score: it gets an empty prefix table (the failure is in results/failed_prompts.csv), so one
failed prompt does not stop the study.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (snakemake is injected)
from engine_call import call_specrej, engine_threads, log_to  # noqa: E402

engine_threads(snakemake.threads)  # noqa: F821 (before pandas and torch load)
log_to(snakemake.log[0])  # noqa: F821

import pandas as pd  # noqa: E402

from analysis.correlation import PREFIX_COLUMNS  # noqa: E402
from specrej.methods import get_method  # noqa: E402
from specrej.records.io import read_records  # noqa: E402
from specrej.records.shards import merge_shards, records_by_prompt  # noqa: E402

out, params = snakemake.output[0], snakemake.params  # noqa: F821
shards = list(snakemake.input.trajectories)  # noqa: F821
trajectories = shards[0]
records = read_records(trajectories)
if len(shards) > 1:
    records = [merge_shards(group, all_candidates=True, label=get_method(group[0]["method"]).label)
               for group in records_by_prompt(shards)]
    trajectories = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, dir=os.path.dirname(out)).name
    with open(trajectories, "w", encoding="utf-8") as pooled:
        pooled.writelines(json.dumps(record) + "\n" for record in records)

if not any("error" not in record for record in records):
    print(f"{trajectories}: every prompt failed; writing an empty prefix table", file=sys.stderr)
    pd.DataFrame(columns=list(PREFIX_COLUMNS)).to_parquet(out, index=False)
    sys.exit(0)

code = call_specrej(["score-prefixes", "--trajectories", trajectories, "--out", out, *params.args],
                    gpus=snakemake.resources.gpu)  # noqa: F821
if len(shards) > 1:
    os.unlink(trajectories)
sys.exit(code)
