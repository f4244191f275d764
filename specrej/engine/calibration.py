"""A machine's step costs, measured once (`specrej calibrate`): the calibration that eq. 7's
modelled compute applies to each record's step profile (`records.step_profile.modelled_seconds`).

Measured with the engine as the runs use it (model, dtype, threads, compiled ranges), on this
device's compute clock (the process's CPU seconds on a CPU, device seconds on CUDA), for:

- the forward step ("plain", and "layer-states" where every layer's states are kept, at the grid's
  first and last rows and 8 and 32) over a grid of rows and contexts: seconds per step;
- the sampler per variant (`records.step_profile.step_variant`) over the same rows;
- the prefill by prompt length;
- the reward's scoring by response length (seconds per response, in batches of `SCORE_BATCH`).

Each point is timed over at least `steps` steps and at least `min_seconds` seconds of the clock
(whole runs of `steps` steps, repeated: a 1-row sampler step takes milliseconds, and a few of
them are mostly noise). Repeats are interleaved (every grid point once, then again), each point's
median kept with its relative spread, (max - min) / median, and its repeats in measuring order
(`by_repeat`: the analysis costs the records on each repeat alone too, and the headline's interval
holds what that moves). The reference condition is one job alone on the machine (the paper's
dedicated GPU): the workflow runs the calibration with every core held.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..records.step_profile import LAYER_STATES, cpu_name
from .decoding import _layer_buffer, decode_chunk_rows, decode_one_token, prefill
from .graph_build import MEASURE_PROMPT
from .graph_cache import artifact_dir
from .sampler import sample
from .sampling import SamplingParams

ROWS = (1, 2, 4, 8, 16, 32, 48, 64, 65, 96, 128)  # 1, 2, 64 and 65: the compiled graphs' range edges
CONTEXTS = (64, 192)
PREFILL_TOKENS = (16, 48, 96, 160, 256)
SCORE_TOKENS = (8, 32, 64)
SCORE_BATCH = 16
MIN_SECONDS = 0.25  # the least compute-clock time a grid point is timed for, per repeat
# each sampler variant's settings: temperature, top-k, and what else it reads off each distribution
SAMPLER_VARIANTS = {"plain": (1.0, 0, 0, False), "tempered": (0.7, 0, 0, False), "filtered": (1.0, 50, 0, False),
                    "plain+certainty": (1.0, 0, 0, True), "plain+top-logprobs": (1.0, 0, 20, False)}
FORWARD_VARIANTS = ("plain", LAYER_STATES)


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median of a point's repeated measurements."""
    return (max(values) - min(values)) / statistics.median(values)


def calibration_path(forward, threads: int, compile: str) -> Path:
    """Where a machine's calibration of `forward` (a compiled one's own forward pass) at `threads`
    threads and --compile `compile` is kept: beside its compiled graphs (`graph_cache.artifact_dir`)."""
    return artifact_dir(getattr(forward, "forward_pass", forward)) / f"calibration-{threads}-threads-compile-{compile}.json"


class _Clock:
    """The compute clock of `device`: CPU seconds of the process, or device seconds on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            return time.perf_counter()
        return time.process_time()


def _per_step(time_run: Callable[[], float], steps: int, min_seconds: float) -> float:
    """Seconds per step from `time_run` (seconds per step over one run of `steps` steps), run again
    until the runs cover `min_seconds` of the clock: their mean."""
    per_step = [time_run()]
    while sum(per_step) * steps < min_seconds:
        per_step.append(time_run())
    return statistics.fmean(per_step)


def _prompt_ids(engine, length: int) -> list[int]:
    base = engine.encode_prompt(MEASURE_PROMPT)
    return (base * (length // len(base) + 1))[:length]


@torch.inference_mode()
def _forward_steps(engine, prompt, rows: int, steps: int, layer_states: bool, clock: _Clock) -> float:
    """Seconds per forward step of `rows` rows over `steps` steps after `prompt` (the sampler not included)."""
    forward = engine.forward
    cache = forward.new_cache()
    cache.share_prompt(prompt.state)
    cache.allocate(rows, steps + 1)
    hidden = prompt.hidden.expand(rows, -1)
    tokens = torch.full((rows,), int(prompt.token_ids[-1]), dtype=torch.long, device=forward.device)
    total = 0.0
    for pos in range(steps):
        states = _layer_buffer(forward, rows) if layer_states else None
        chunk = decode_chunk_rows(forward, engine.decode_chunk_bytes, cache.prompt_len + pos + 1)
        start = clock()
        hidden = decode_one_token(forward, cache, tokens, pos, chunk, states)
        total += clock() - start
    cache.free()
    return total / steps


@torch.inference_mode()
def _sample_steps(engine, hidden: torch.Tensor, variant: str, steps: int, clock: _Clock) -> float:
    temperature, top_k, top_logprobs, certainty = SAMPLER_VARIANTS[variant]
    params = SamplingParams(temperature=temperature, top_k=top_k, max_new_tokens=steps)
    generator = torch.Generator(device=hidden.device).manual_seed(0)
    start = clock()
    for _ in range(steps):
        sample(engine.forward, hidden, params, generator, engine.sample_chunk_rows, top_logprobs, certainty,
               engine.draw_tokens)
    return (clock() - start) / steps


@torch.inference_mode()
def _prefill_once(engine, ids: list[int], clock: _Clock) -> float:
    start = clock()
    prefill(engine.forward, ids)
    return clock() - start


def measure_score(engine, reward, *, tokens: Sequence[int] = SCORE_TOKENS, repeats: int = 3,
                  progress: Callable[[str], None] = print) -> dict:
    """`reward`'s seconds per scored response by response length (batches of `SCORE_BATCH` of
    `engine`'s tokens), repeats interleaved: a calibration's score table."""
    clock = _Clock(engine.device)
    times = {n: [] for n in tokens}
    for _ in range(repeats):
        for n, kept in times.items():
            kept.append(_score_once(reward, engine, n, clock))
    progress(f"calibration: the reward's scoring at {', '.join(map(str, tokens))} tokens")
    return {"tokens": list(tokens), **_summarised([times[n] for n in tokens])}


def _summarised(points: list) -> dict:
    """A table's points (lists of repeated measurements, nested by the table's axes): each point's
    median ("seconds"), relative spread ("spread") and every repeat in measuring order ("by_repeat"),
    from which the analysis costs the records on each repeat alone."""
    def each(nested, summary):
        return [each(item, summary) for item in nested] if nested and isinstance(nested[0], list) else summary(nested)
    return {"seconds": each(points, statistics.median), "spread": each(points, relative_spread),
            "by_repeat": each(points, list)}


def _score_once(reward, engine, length: int, clock: _Clock) -> float:
    from ..rewards.reward import Response

    ids = _prompt_ids(engine, length)
    text = engine.detokenize([ids])[0]
    responses = [Response(text, ids, [-1.0] * length, [0.0] * length) for _ in range(SCORE_BATCH)]
    start = clock()
    reward.score(MEASURE_PROMPT, responses)
    return (clock() - start) / SCORE_BATCH


def measure(engine, *, rows: Sequence[int] = ROWS, contexts: Sequence[int] = CONTEXTS, steps: int = 4,
            repeats: int = 3, samplers: Sequence[str] = tuple(SAMPLER_VARIANTS),
            forwards: Sequence[str] = FORWARD_VARIANTS, prefill_tokens: Sequence[int] = PREFILL_TOKENS,
            min_seconds: float = MIN_SECONDS, progress: Callable[[str], None] = print) -> dict:
    """`engine`'s step costs on this machine (the module's docstring): the forward, sampler and
    prefill tables of a calibration."""
    clock = _Clock(engine.device)
    rows, contexts = sorted(set(rows)), sorted(set(contexts))
    # each context's prompt, prefilled once (outside every timing): its steps attend about `context`
    prompts = {c: prefill(engine.forward, _prompt_ids(engine, max(1, c - (steps + 1) // 2))) for c in contexts}
    warm = prompts[contexts[0]]
    for r in sorted({rows[0], rows[-1], *(r for r in rows if r in (1, 2, 64, 65))}):  # a compiled engine
        _forward_steps(engine, warm, r, 1, False, clock)  # loads (or compiles) each range's graphs here,
        for variant in samplers:  # the tempered sampler's too: untimed
            _sample_steps(engine, warm.hidden.expand(r, -1).contiguous(), variant, 1, clock)
    # the forward keeping every layer's states (ST-BoN's first steps) at fewer rows: the ends and 8, 32
    forward_rows = {f: (rows if f != LAYER_STATES else sorted({rows[0], rows[-1], *(r for r in rows if r in (8, 32))}))
                    for f in forwards}
    forward_times = {(f, r, c): [] for f in forwards for r in forward_rows[f] for c in contexts}
    sample_times = {(v, r): [] for v in samplers for r in rows}
    prefill_times = {p: [] for p in prefill_tokens}
    for repeat in range(repeats):
        started = time.perf_counter()
        for (variant, r, c), kept in forward_times.items():
            kept.append(_per_step(lambda: _forward_steps(engine, prompts[c], r, steps, variant == LAYER_STATES, clock),
                                  steps, min_seconds))
        hidden = prompts[contexts[0]].hidden
        for (variant, r), kept in sample_times.items():
            rows_hidden = hidden.expand(r, -1).contiguous()
            kept.append(_per_step(lambda: _sample_steps(engine, rows_hidden, variant, steps, clock), steps, min_seconds))
        for p, kept in prefill_times.items():
            kept.append(_prefill_once(engine, _prompt_ids(engine, p), clock))
        progress(f"calibration: repeat {repeat + 1} of {repeats} ({time.perf_counter() - started:.0f} s)")

    actual_contexts = [max(1, c - (steps + 1) // 2) + (steps + 1) / 2 for c in contexts]
    calibration = {
        "kind": "measured", "estimate": False,
        "forward": {f: {"rows": forward_rows[f], "contexts": actual_contexts,
                        **_summarised([[forward_times[f, r, c] for c in contexts] for r in forward_rows[f]])}
                    for f in forwards},
        "sample": {v: {"rows": rows, **_summarised([sample_times[v, r] for r in rows])} for v in samplers},
        "prefill": {"tokens": list(prefill_tokens), **_summarised([prefill_times[p] for p in prefill_tokens])},
        "steps_per_point": steps, "min_seconds": min_seconds, "repeats": repeats,
    }
    # the step's own spread, the forward's and the sampler's (not the scoring's: microseconds, all noise)
    spreads = [s for table in calibration["forward"].values() for row in table["spread"] for s in row]
    calibration["largest_spread"] = max(spreads + [s for t in calibration["sample"].values() for s in t["spread"]])
    return calibration
