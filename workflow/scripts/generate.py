"""`specrej generate` for one job of a generation rule (reference_shard, reference_direct, method_run).

params.args holds the job's options (workflow/job_options.py: reference_args, method_args). The engine appends to
params.partial, a file named by those options that it resumes when a killed job is rerun; only
a finished file is moved onto the output, so Snakemake never sees a half run.
"""

import os
import shlex
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (snakemake is injected)
from engine_call import call_specrej, engine_threads, log_to  # noqa: E402

engine_threads(snakemake.threads)  # noqa: F821
log_to(snakemake.log[0])  # noqa: F821
params = snakemake.params  # noqa: F821
os.makedirs(os.path.dirname(params.partial), exist_ok=True)
argv = ["generate", *shlex.split(params.args), "--prompts", snakemake.input.prompts, "--out", params.partial,  # noqa: F821
        "--threads", str(snakemake.threads)]  # noqa: F821
code = call_specrej(argv, gpus=snakemake.resources.gpu)  # noqa: F821
if code == 0:
    os.replace(params.partial, snakemake.output[0])  # noqa: F821
# Leave at once, as a shell's `... && mv partial output` would: Snakemake records the job as
# finished only when this process ends, and a run killed in between (seconds of interpreter
# teardown with torch loaded) would redo the job on --rerun-incomplete although its output is done.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
