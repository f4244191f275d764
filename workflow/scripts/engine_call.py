"""The one way the workflow calls the engine: `specrej.cli.main.main(argv)` in the job's own process.

Both engine rules (the generation rules through generate.py, score_prefixes through
score_prefixes.py) run their `specrej` command line through `call_specrej`, with the options the
plan built (workflow/job_options.py), so the engine's CLI parser checks them as it checks a user's.

    engine_threads(snakemake.threads)   # first, before numpy or torch load
    log_to(snakemake.log[0])
    code = call_specrej(["generate", *args], gpus=snakemake.resources.gpu)
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys


def engine_threads(threads: int) -> None:
    """Let torch and MKL use the job's `threads` cores: call before they are imported."""
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)


def log_to(path: str) -> None:
    """Send this process's stdout and stderr (the file descriptors: native libraries' output
    too) to `path`, as a shell's `> log 2>&1` would."""
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


def call_specrej(argv: list[str], *, gpus: int) -> int:
    """Run `specrej ARGV` here and return its exit code; a GPU job (`gpus` > 0) holds one free
    local GPU while it runs (gpu_slot.py)."""
    from gpu_slot import gpu_slot

    from specrej.cli.main import main

    print("specrej " + " ".join(shlex.quote(str(a)) for a in argv), file=sys.stderr)
    with gpu_slot() if gpus else contextlib.nullcontext():
        return main([str(a) for a in argv])
