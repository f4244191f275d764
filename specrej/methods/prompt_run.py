"""One prompt through a method: `run_method` runs it in a `session.Session`, with the memory
measurement around it and out-of-memory retries with half the batch; `flop_shapes` gives the
session the shapes its FLOP count needs; `call_run` holds a method to what its `run` must do."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import warnings
from collections.abc import Mapping
from types import MappingProxyType

import torch

from ..engine.budget import PeakMemory
from ..engine.sampling import SamplingParams
from ..errors import SpecrejError
from ..records import flops
from ..records.result import Result
from ..rewards.reward import Reward
from .out_of_memory import BatchOutOfMemory
from .session import FlopShapes, Session
from .surface import REMOVED, replaced


def flop_shapes(engine, reward: Reward) -> FlopShapes | None:
    """The generator's and the reward model's shapes, or None (with a warning) for a model whose
    shape the FLOP count cannot read."""
    try:
        reward_model = getattr(reward, "model", None)  # a sequence-classification reward model's own network
        return FlopShapes(flops.ModelShape.from_config(engine.config),
                          None if reward_model is None else flops.ModelShape.from_config(reward_model.config))
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        warnings.warn(f"no FLOP count for these runs ({error})", stacklevel=2)
        return None


def measure_memory_default(device: torch.device) -> bool:
    """Measure the peak memory of each prompt's run? SPECREJ_MEASURE_MEMORY (1 / 0) if set, else on
    for CUDA (the allocator's statistics cost nothing) and off on CPU (budget.StorageTracker
    intercepts every op, which slows the run and would bias timings: docs/results.md, "Memory")."""
    setting = os.environ.get("SPECREJ_MEASURE_MEMORY", "").strip()
    return setting not in ("0", "false") if setting else device.type == "cuda"


def run_method(method, params, engine, reward: Reward, prompt: str, *, sampling: SamplingParams = SamplingParams(),
               seed: int = 0, memory_budget: int | None = None, measure_memory: bool | None = None,
               shapes: FlopShapes | None = None, run_params: Mapping = MappingProxyType({}),
               prompt_id: int | str | None = None, answer_extract: str = "first-number") -> Result:
    """`method` (a `Method`) with its checked `params` on one prompt. Out of memory (CUDA, or the
    host) in a batch of the method's `batch_param` (Best-of-N: the same n in more batches; SR: half
    the initial batch), the prompt runs again from the start with half that batch, until a batch of
    one fails too; `Result.retries` counts the retries and the batch that succeeded is in its
    params. Responses are never cut short to make room. `measure_memory`: see
    `measure_memory_default` (None: that default); `run_params`: the run's part of the result's
    params (`record_params`); `prompt_id`: the prompt's id in its file, as the session gives it;
    `answer_extract`: how the session finds a response's answer (`Session.answer`)."""
    if measure_memory is None:
        measure_memory = measure_memory_default(engine.device)
    retries = 0
    while True:
        try:
            meter = PeakMemory(engine.device) if measure_memory else None
            with meter or contextlib.nullcontext():
                session = Session(engine, reward, prompt, sampling, seed, memory_budget, shapes, prompt_id,
                                  answer_extract)
                recorded = call_run(method, session, params)
                result = session.finish(method.record_method or method.name, recorded, run_params)
            result.measured_peak_bytes = meter.peak_bytes if meter else None
            result.retries = retries
            return result
        except BatchOutOfMemory as error:
            failure = error  # leaving the except block drops the failed attempt's frames (its tensors)
        session = None
        gc.collect()
        if engine.device.type == "cuda":
            torch.cuda.empty_cache()
        if method.batch_param is None or not failure.rows or failure.rows <= 1:
            where = "before any row was sampled" if not failure.rows else f"with a batch of {failure.rows}"
            raise SpecrejError(f"out of memory {where} ({failure.detail})")
        params = params.replace(**{method.batch_param: failure.rows // 2})
        retries += 1
        warnings.warn(f"out of memory with a batch of {failure.rows} ({failure.detail}); retrying the prompt with "
                      f"{failure.rows // 2}", stacklevel=2)


# Round's own TypeError for a field that 0.1.0 had: its keyword, or the nine positional fields
_OLD_ROUND = re.compile(r"Round\.__init__\(\) (?:got an unexpected keyword argument '(\w+)'"
                        r"|takes from \d+ to \d+ positional arguments but \d+ were given)")
_OLD_ROUND_POSITIONAL = next(name for name in REMOVED if name.startswith("Round(decision_token"))


def call_run(method, session: Session, params) -> Mapping:
    """`method.run(session, params)`, held to the surface's contract: it returns a mapping (the
    method's part of the record's params), else one line saying so; a `Round` made with a field
    that an earlier specrej had fails with one line naming what replaced it (`surface.REMOVED`)."""
    try:
        recorded = method.run(session, params)
    except TypeError as error:
        old = _OLD_ROUND.fullmatch(str(error))
        if old is None or (old[1] and f"Round({old[1]}=...)" not in REMOVED):
            raise
        spelling = f"Round({old[1]}=...)" if old[1] else _OLD_ROUND_POSITIONAL
        raise TypeError(replaced(spelling)) from error
    if not isinstance(recorded, Mapping):
        got = "None" if recorded is None else type(recorded).__name__
        raise TypeError(f"method {method.name}'s run must return a dict (its setting as it ran, which the record's "
                        f"params hold), got {got}")
    return recorded
