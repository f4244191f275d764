"""Building a machine's compiled graphs ahead, with the measurement `--compile auto` decides by
(`specrej compile`): for each row range of the compiled step (`compiled.row_range`), the graphs
of the step and of the plain sampler are compiled into the cache (`graph_cache.artifact_dir`), then
eager and compiled steps are timed in turn on this machine at one row count of the range, and the
times are kept beside the graphs (`graph_cache.write_measurement`). A later run with `--compile
auto` runs compiled on the ranges whose graphs are there and whose measurement says they are
faster, eager on the others (`compile_ranges`)."""

from __future__ import annotations

import time

import torch

from ..errors import SpecrejError, shown
from .compiled import ALL_RANGES, CompiledForward, row_range
from .decoding import prefill
from .graph_cache import artifact_dir, read_measurement, write_measurement
from .sampling import SamplingParams

COMPILE_SETTINGS = ("auto", "on", "off")

MEASURE_PROMPT = "Write a short story about a robot who learns to paint."


def compile_ranges(setting: str, forward) -> tuple[str, ...]:
    """The row ranges (`compiled.row_range`) whose decode step runs compiled under --compile
    `setting` for `forward` (the engine's own forward pass, `kind` "llama", or the fallback, never
    compiled): on, every range; off, none; auto, those whose graphs this machine built and whose
    measurement, kept beside them at this thread count (`build_and_measure`), found compiled faster
    than eager; none where there is no measurement (a cold compile does not pay within one run)."""
    if setting not in COMPILE_SETTINGS:
        raise SpecrejError(f"--compile must be one of {', '.join(COMPILE_SETTINGS)}, got {shown(setting)}")
    fast_path = forward.kind == "llama"
    if setting == "on" and not fast_path:
        raise SpecrejError("--compile on: only the engine's own forward passes compile (Llama, Mistral, Qwen2, "
                           "Qwen3, Gemma 3); this model runs through the fallback (use --compile off or auto)")
    if setting == "on":
        return ALL_RANGES
    if setting == "off" or not fast_path:
        return ()
    measured = (kept_measurement(forward, torch.get_num_threads()) or {}).get("ranges", {})
    return tuple(name for name in ALL_RANGES if name in measured and measured[name]["compiled_s"] < measured[name]["eager_s"])


def kept_measurement(forward, threads: int) -> dict | None:
    """The measurement kept beside `forward`'s graphs at `threads` threads (`build_and_measure`), its
    ranges only those whose graphs (the step's and the plain sampler's) are still there; None without one."""
    artifacts = artifact_dir(forward)
    measured = read_measurement(artifacts, threads)
    if measured is None:
        return None
    ranges = {name: m for name, m in measured.get("ranges", {}).items()
              if all((artifacts / f"{graph}-{name}.bin").is_file() for graph in ("step", "sample"))}
    return {**measured, "ranges": ranges}


def step_seconds(engine, rows: int, tokens: int, repeats: int) -> float:
    """The best of `repeats` times of `tokens` decode steps of `rows` rows of `engine` (an
    `engine.Engine`; each step's draw and
    forward step; the prefill outside the time, no row stopping), in seconds per step."""
    engine = engine.with_forward(engine.forward)
    engine.stop_token_ids = torch.tensor([-1], device=engine.device)
    prompt = prefill(engine.forward, engine.encode_prompt(MEASURE_PROMPT))
    best = float("inf")
    for _ in range(repeats):
        rollout = engine.rollout(prompt, rows, tokens, SamplingParams(max_new_tokens=tokens),
                                 torch.Generator(device=engine.device).manual_seed(0))
        start = time.perf_counter()
        while rollout.num_rows:
            rollout.step()
        best = min(best, (time.perf_counter() - start) / tokens)
        rollout.release()
    return best


def build_and_measure(engine, rows: tuple[int, ...] = (1, 16, 128), tokens: int = 32,
                      repeats: int = 3, progress=print) -> dict:
    """The compiled graphs of `engine`'s model built for the row range of each of `rows` (an eager
    engine), and eager against compiled seconds per step measured there, in turn; the measurement
    written beside the graphs and returned: {"threads", "tokens", "ranges": {range: {"rows",
    "eager_s", "compiled_s"}}, "measured_at"}."""
    if engine.compiled:
        raise ValueError("build_and_measure takes an eager engine (load it with compile='off')")
    compiled = engine.with_forward(CompiledForward(engine.forward))
    ranges = {}
    for count in rows:
        step_seconds(compiled, count, 2, 1)  # builds (or loads) the range's graphs: not timed
        eager_s = step_seconds(engine, count, tokens, repeats)
        compiled_s = step_seconds(compiled, count, tokens, repeats)
        ranges[row_range(count)] = {"rows": count, "eager_s": eager_s, "compiled_s": compiled_s}
        progress(f"{count:>5} rows ({row_range(count)}): eager {1000 * eager_s:.2f} ms/step, compiled "
                 f"{1000 * compiled_s:.2f} ms/step ({eager_s / compiled_s:.2f}x)")
    measurement = {"threads": torch.get_num_threads(), "tokens": tokens, "ranges": ranges,
                   "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_measurement(compiled.forward.artifacts, measurement)
    return measurement
