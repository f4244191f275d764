"""`specrej score-prefixes` on one chunk of full generations, through its command line.

A chunk whose every prompt failed has nothing to score: it gets an empty prefix table (the
failure is in results/failed_prompts.csv), so one failed prompt does not stop the study.
"""

import contextlib
import os
import sys

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch loads
    os.environ[variable] = str(snakemake.threads)  # noqa: F821 (snakemake is injected)

import pandas as pd  # noqa: E402

from analysis.correlation import PREFIX_COLUMNS  # noqa: E402
from specrej.cli import main  # noqa: E402
from specrej.io import read_records  # noqa: E402

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from gpu_slot import gpu_slot  # noqa: E402

log = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
sys.stderr = log
trajectories, out = snakemake.input[0], snakemake.output[0]  # noqa: F821
params = snakemake.params  # noqa: F821

if not any("error" not in record for record in read_records(trajectories)):
    print(f"{trajectories}: every prompt failed; writing an empty prefix table", file=log)
    pd.DataFrame(columns=list(PREFIX_COLUMNS)).to_parquet(out, index=False)
    sys.exit(0)

with gpu_slot() if snakemake.resources.gpu else contextlib.nullcontext(), contextlib.redirect_stdout(log):  # noqa: F821
    code = main(["score-prefixes", "--trajectories", trajectories, "--out", out, *params.args])
sys.exit(code)
