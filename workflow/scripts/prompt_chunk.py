"""One chunk of the prompt set: the prompts whose ids the plan gave it, in that order."""

import json
import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
wanted = [str(i) for i in snakemake.params.prompts["ids"]]  # noqa: F821
with open(snakemake.input[0], encoding="utf-8") as lines:  # noqa: F821
    prompts = {str(record["prompt_id"]): record for record in map(json.loads, lines)}
missing = [i for i in wanted if i not in prompts]
if missing:
    sys.exit(f"prompt ids {missing} are not in {snakemake.input[0]}")  # noqa: F821
with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    out.writelines(json.dumps(prompts[i], ensure_ascii=False) + "\n" for i in wanted)
