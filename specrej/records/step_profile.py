"""A record's step profile, and eq. 7's compute modelled from it (torch-free).

The engine keeps the steps it ran (`engine.decoding.Rollout.step_runs`); the session writes them
into each record as ``steps``:

    {"prefill": [prompt tokens of each prefill],
     "decode": [[rows_sampled, rows_fed, first_context, count, variant], ...],
     "scored": [[response tokens, responses], ...]}

A decode entry is a run of `count` steps alike in rows sampled (the rows that drew a token),
rows fed (those that went on through the model: the rows sampled less the ones that finished)
and variant (`step_variant`), at the consecutive contexts first_context, first_context + 1, ...
(the positions each fed row attends to: the prompt and its tokens so far). ``scored`` counts the
responses given to the reward, by length.

A calibration (`specrej calibrate`: `engine.calibration`) holds a machine's measured seconds per
step over a grid of rows and contexts, per variant, prefill seconds by prompt length and the
reward's seconds per response by length; `modelled_seconds` applies one to a profile, so a
record's compute is the same on every rerun and can be recomputed by a reader. `roofline_calibration`
makes one from two numbers of a data sheet (an estimate, never a measurement).
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from . import flops

# the sampler part of a variant: plain (temperature 1, no cut), tempered (another temperature, no
# cut), filtered (a top-k or top-p cut, or greedy); extras read more off each distribution or step
SAMPLERS = ("plain", "tempered", "filtered")
SAMPLER_EXTRAS = ("certainty", "top-logprobs")
LAYER_STATES = "layer-states"  # the forward step keeps every layer's states


def cpu_name() -> str:
    """The CPU's name as lscpu gives it ("Model name", /proc/cpuinfo's "model name")."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def read_calibration(path: Path) -> dict | None:
    """The measured calibration kept at `path` (`specrej calibrate`); None where there is none, it cannot
    be read or it is an estimate."""
    try:
        kept = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and kept.get("kind") == "measured" else None


def step_variant(temperature: float, top_k: int, top_p: float, *, top_logprobs: bool = False,
                 certainty: bool = False, layer_states: bool = False) -> str:
    """The variant of a decode step: its sampler ("plain", "tempered", "filtered"), then "+" each
    extra it computes ("certainty", "top-logprobs", "layer-states")."""
    if temperature > 0 and not top_k and top_p == 1:
        sampler = "plain" if temperature == 1 else "tempered"
    else:
        sampler = "filtered"
    extras = [name for name, on in (("certainty", certainty), ("top-logprobs", top_logprobs),
                                    (LAYER_STATES, layer_states)) if on]
    return "+".join([sampler, *extras])


def split_variant(variant: str) -> tuple[str, str]:
    """(sampler variant, forward variant) of a step's variant: the forward is "layer-states" or "plain"."""
    parts = variant.split("+")
    forward = LAYER_STATES if LAYER_STATES in parts else "plain"
    return "+".join(p for p in parts if p != LAYER_STATES), forward


def add_step(runs: list[list], rows_sampled: int, rows_fed: int, context: int, variant: str) -> None:
    """Count one step in `runs` (run-length, as a record's ``steps["decode"]`` holds them)."""
    if runs:
        last = runs[-1]
        if last[0] == rows_sampled and last[1] == rows_fed and last[4] == variant and last[2] + last[3] == context:
            last[3] += 1
            return
    runs.append([rows_sampled, rows_fed, context, 1, variant])


def profile(prefills: Sequence[int], decode_runs: Iterable[Sequence[list]], scored_lengths: Iterable[int]) -> dict:
    """A record's ``steps``: the prompt lengths it prefilled, every batch's decode runs in order,
    the scored responses by length."""
    return {"prefill": list(prefills), "decode": [list(run) for runs in decode_runs for run in runs],
            "scored": sorted([length, count] for length, count in Counter(scored_lengths).items())}


def merged(profiles: Sequence[Mapping]) -> dict | None:
    """The profiles of several runs (a Best-of-N's shards) as one; None unless every run has one."""
    if not profiles or any(p is None for p in profiles):
        return None
    scored = Counter()
    for p in profiles:
        scored.update({length: count for length, count in p["scored"]})
    return {"prefill": [n for p in profiles for n in p["prefill"]],
            "decode": [list(run) for p in profiles for run in p["decode"]],
            "scored": sorted([length, count] for length, count in scored.items())}


def step_counts(steps: Mapping) -> dict:
    """What a profile adds up to, in the terms the engine's FLOP count uses: steps, tokens sampled
    (rows sampled, summed), tokens fed and positions attended (rows fed x context, summed)."""
    sampled = fed = attended = count = 0
    for rows_sampled, rows_fed, first, n, _ in steps["decode"]:
        count += n
        sampled += rows_sampled * n
        fed += rows_fed * n
        attended += rows_fed * (n * first + n * (n - 1) // 2)
    return {"steps": count, "tokens_sampled": sampled, "tokens_fed": fed, "positions_attended": attended}


# -- eq. 7's compute from a calibration -----------------------------------------------------
def _interp(x: np.ndarray, xs: Sequence[float], ys: Sequence[float]) -> np.ndarray:
    """Piecewise-linear in x through (xs, ys), and linear beyond the ends from the two nearest points."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(xs) == 1:
        return np.full_like(x, ys[0], dtype=float)
    y = np.interp(x, xs, ys)
    low, high = x < xs[0], x > xs[-1]
    y[low] = ys[0] + (x[low] - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
    y[high] = ys[-1] + (x[high] - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return y


def forward_seconds(table: Mapping, rows: np.ndarray, contexts: np.ndarray) -> np.ndarray:
    """Seconds of forward steps of `rows` rows at `contexts` from a calibration's forward table
    ({"rows", "contexts", "seconds": [row][context]}): linear in rows between the measured rows,
    then linear in the context between the measured contexts (both extended linearly beyond)."""
    rows, contexts = np.asarray(rows, dtype=float), np.asarray(contexts, dtype=float)
    seconds = np.asarray(table["seconds"], dtype=float)  # [rows, contexts]
    at_rows = np.stack([_interp(rows, table["rows"], seconds[:, j]) for j in range(seconds.shape[1])], axis=-1)
    grid = np.asarray(table["contexts"], dtype=float)
    if len(grid) == 1:
        return at_rows[:, 0]
    segment = np.clip(np.searchsorted(grid, contexts) - 1, 0, len(grid) - 2)
    weight = (contexts - grid[segment]) / (grid[segment + 1] - grid[segment])
    index = np.arange(len(contexts))
    return at_rows[index, segment] * (1 - weight) + at_rows[index, segment + 1] * weight


def modelled_seconds(steps: Mapping, calibration: Mapping) -> dict:
    """Eq. 7's compute of a record's `steps` on `calibration`: {"prefill", "sample", "forward",
    "score", "total"} seconds. A step costs its sampler's seconds at its rows sampled plus its
    forward's at its rows fed and context (none when no row was fed). KeyError names a variant
    the calibration did not measure."""
    prefill = calibration["prefill"]
    prefill_s = float(_interp(np.asarray(steps["prefill"], dtype=float), prefill["tokens"], prefill["seconds"]).sum()) \
        if steps["prefill"] else 0.0
    sample_s = forward_s = 0.0
    for variant, runs in _by_variant(steps["decode"]).items():
        sampler, forward = split_variant(variant)
        if sampler not in calibration["sample"] or forward not in calibration["forward"]:
            raise KeyError(f"the calibration has no {'sampler' if sampler not in calibration['sample'] else 'forward'} "
                           f"variant {sampler if sampler not in calibration['sample'] else forward!r} "
                           f"(measured: sampler {sorted(calibration['sample'])}, forward {sorted(calibration['forward'])}; "
                           "`specrej calibrate --samplers`, the workflow's calibration.samplers, names what is measured)")
        runs = np.asarray(runs, dtype=float)  # rows_sampled, rows_fed, first_context, count
        sample = calibration["sample"][sampler]
        sample_s += float((runs[:, 3] * _interp(runs[:, 0], sample["rows"], sample["seconds"])).sum())
        fed = runs[runs[:, 1] > 0]
        if len(fed):  # each step of a run at its own context
            counts = fed[:, 3].astype(int)
            rows = np.repeat(fed[:, 1], counts)
            contexts = np.concatenate([first + np.arange(n) for first, n in zip(fed[:, 2], counts)])
            forward_s += float(forward_seconds(calibration["forward"][forward], rows, contexts).sum())
    score = calibration.get("score")
    score_s = 0.0
    if steps.get("scored") and score is not None:
        lengths = np.asarray(steps["scored"], dtype=float)
        score_s = float((lengths[:, 1] * _interp(lengths[:, 0], score["tokens"], score["seconds"])).sum())
    return {"prefill": prefill_s, "sample": sample_s, "forward": forward_s, "score": score_s,
            "total": prefill_s + sample_s + forward_s + score_s}


def _by_variant(decode: Iterable[Sequence]) -> dict[str, list[list]]:
    grouped: dict[str, list[list]] = {}
    for rows_sampled, rows_fed, first, count, variant in decode:
        grouped.setdefault(variant, []).append([rows_sampled, rows_fed, first, count])
    return grouped


def roofline_calibration(peak_flops: float, bandwidth: float, shape: flops.ModelShape, *, bytes_per_value: float = 2.0,
                         rows: Sequence[int] = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 4096),
                         contexts: Sequence[int] = (64, 256, 1024, 4096), name: str = "roofline") -> dict:
    """A calibration estimated from a device's peak FLOP/s and memory bandwidth (bytes/s): each part
    of a step takes the longer of its FLOPs at peak (`flops`' count) and its bytes at full bandwidth:
    the forward reads the layers' weights once and each row's KV at its context; the sampler reads the
    head's weights and writes and reads the fp32 logits; a prefill reads the weights once. Labelled
    an estimate: it costs the steps as an ideal device would, where a 128-row step costs about what
    a 16-row one does until the matmuls become compute-bound."""
    kv_values = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim  # K and V per token, all layers
    layers_bytes = flops.non_embedding_params(shape) * bytes_per_value
    head_bytes = shape.hidden_size * shape.vocab_size * bytes_per_value

    def forward(r: int, c: int) -> float:
        return max(flops.decode_flops(shape, 0, r, r * c) / peak_flops,
                   (layers_bytes + r * c * kv_values * bytes_per_value) / bandwidth)

    def sample(r: int) -> float:
        return max(flops.decode_flops(shape, r, 0, 0) / peak_flops, (head_bytes + 3 * r * shape.vocab_size * 4) / bandwidth)

    def prefill(p: int) -> float:
        return max(flops.prefill_flops(shape, p, logits_positions=0) / peak_flops, (layers_bytes + head_bytes) / bandwidth)

    table = {"rows": list(rows), "contexts": list(contexts), "seconds": [[forward(r, c) for c in contexts] for r in rows]}
    samplers = [*SAMPLERS, *(f"{s}+{e}" for s in SAMPLERS for e in SAMPLER_EXTRAS),
                *(f"{s}+certainty+top-logprobs" for s in SAMPLERS)]
    tokens = [16, 64, 256, 1024, 4096]
    return {"kind": "roofline", "estimate": True, "name": name,
            "condition": f"roofline estimate ({peak_flops:.3g} FLOP/s, {bandwidth:.3g} B/s): not a measurement",
            "peak_flops": peak_flops, "bandwidth": bandwidth, "shape": shape.to_dict(),
            "forward": {"plain": table, LAYER_STATES: table},
            "sample": {v: {"rows": list(rows), "seconds": [sample(r) for r in rows]} for v in samplers},
            "prefill": {"tokens": tokens, "seconds": [prefill(p) for p in tokens]},
            "score": None}
