"""The reasoning-gym problem set of `prompts.problems` as a prompts file (workflow/answers_plan.py
problem_set_lines: the function the plan itself reads the prompts from), one JSON line per problem
{prompt_id, prompt, answer, extract, check, entry, problem_set}. Its digest must be the one the plan
saw (params.digest): a job in an environment whose reasoning-gym draws other problems stops."""

import json
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 (workflow/: answers_plan.py)
from answers_plan import problem_set_lines  # noqa: E402

params = snakemake.params  # noqa: F821
lines = problem_set_lines(params.problems)
if lines[0]["problem_set"] != params.digest:
    sys.exit(f"the problem set is {lines[0]['problem_set']} here but was {params.digest} when the study was "
             "planned: the reasoning-gym installed where this job runs draws other problems")
with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    out.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
print(f"{len(lines)} problems of {params.problems['task']}: {params.digest}", file=sys.stderr)
