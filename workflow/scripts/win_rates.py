"""results/evaluation/win_rates.csv, Table 1's input: per Table 1 pair, each method's best
responses judged against Bo-N_min's by `evaluation.judge` (analysis.winrate.table1_from_files:
columns analysis.winrate.TABLE1_INPUT_COLUMNS, generator = the config's display label), and the
per-pair annotations under results/evaluation/annotations/.

Prompts that failed in any run of a pair are left out of all its methods (table1.py names them
under the table). When the judge cannot run here (`judge: null`, gpt4_turbo without an OpenAI
key, alpaca_eval not installed, a local model that does not load) every row reads
"not evaluated: <reason>" and the step still succeeds.
"""

import contextlib
import logging
import os
import sys
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before a local judge loads torch
    os.environ[variable] = str(snakemake.threads)  # noqa: F821 (snakemake is injected)

from analysis.winrate import table1_from_files  # noqa: E402

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from gpu_slot import gpu_slot  # noqa: E402

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
params, out = snakemake.params, snakemake.output  # noqa: F821
Path(out.annotations).mkdir(parents=True, exist_ok=True)
print(f"judge: {params.judge!r}", file=sys.stderr)
with gpu_slot() if snakemake.resources.gpu else contextlib.nullcontext():  # noqa: F821
    inputs = table1_from_files(params.runs, judge=params.judge, annotations_dir=out.annotations)
inputs.to_csv(out.win_rates, index=False)
print(inputs.to_string(), file=sys.stderr)
