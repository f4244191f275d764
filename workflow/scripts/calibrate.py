"""`specrej calibrate --if-missing` for one pair (rule calibrate), at the generation jobs' threads,
its copy (with the CPU's name, the date and each point's spread) the job's output."""

import os
import shlex
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (snakemake is injected)
from engine_call import call_specrej, engine_threads, log_to  # noqa: E402

threads = snakemake.params.engine_threads  # noqa: F821 (the job holds every core; the engine runs on these)
engine_threads(threads)
log_to(snakemake.log[0])  # noqa: F821
argv = ["calibrate", *shlex.split(snakemake.params.args), "--threads", str(threads),  # noqa: F821
        "--out", snakemake.output[0]]  # noqa: F821
code = call_specrej(argv, gpus=snakemake.resources.gpu)  # noqa: F821
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
