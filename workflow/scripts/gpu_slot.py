"""Hold one free local GPU while a GPU job runs: `with gpu_slot(): ...` (engine_call.py, win_rates.py).

Snakemake's `--resources gpu=N` (profiles/workstation) caps how many GPU jobs run at once but
does not say which GPU each one gets; this holds an exclusive lock on one of the machine's GPUs
(lock files in $SPECREJ_GPU_LOCKS, default .snakemake/gpu-locks) for as long as the job runs and
sets CUDA_VISIBLE_DEVICES to it, before the job's code initialises CUDA. Where a scheduler
already chose the GPUs (SLURM sets CUDA_VISIBLE_DEVICES), or the machine has none, nothing changes.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path


def local_gpus() -> list[str]:
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                                 capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in listing.splitlines() if line.strip()]


@contextmanager
def gpu_slot(poll_s: float = 2.0):
    """Hold one free GPU (sets CUDA_VISIBLE_DEVICES in this process) until the block ends."""
    gpus = [] if "CUDA_VISIBLE_DEVICES" in os.environ else local_gpus()
    if not gpus:
        yield os.environ.get("CUDA_VISIBLE_DEVICES")
        return
    folder = Path(os.environ.get("SPECREJ_GPU_LOCKS", ".snakemake/gpu-locks"))
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for gpu in gpus:
            handle = open(folder / f"gpu{gpu}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            try:
                yield gpu
            finally:
                handle.close()  # releases the lock
            return
        time.sleep(poll_s)  # more GPU jobs than GPUs: Snakemake's gpu resource should prevent this

