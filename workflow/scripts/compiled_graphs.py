"""`specrej compile --if-missing` for one model and dtype (rule compiled_graphs), at the generation
jobs' threads; its measurement, with the row ranges auto runs compiled on, is the job's output. Where the
graphs cannot be built here (a device or model torch.compile fails on), the output says so and the
study goes on eager: compiling is a speed-up, not part of any result."""

import json
import os
import shlex
import sys
import traceback

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (snakemake is injected)
from engine_call import call_specrej, engine_threads, log_to  # noqa: E402

engine_threads(snakemake.threads)  # noqa: F821
log_to(snakemake.log[0])  # noqa: F821
out = snakemake.output[0]  # noqa: F821
argv = ["compile", *shlex.split(snakemake.params.args), "--threads", str(snakemake.threads), "--out", out]  # noqa: F821
try:
    code = call_specrej(argv, gpus=snakemake.resources.gpu)  # noqa: F821
except Exception:  # torch.compile's own errors are not specrej's: logged, and the study goes on eager
    traceback.print_exc()
    code = 1
if code in (1, 2):  # failed or refused; an interrupt (128 + signal) stays the job's failure
    print(f"specrej compile failed (exit {code}): this study's jobs run eager", file=sys.stderr)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"compiled_ranges": [], "failed": f"specrej compile exit {code}: {snakemake.log[0]}"}, handle)  # noqa: F821
        handle.write("\n")
    code = 0
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
