"""The decode step compiled (`--compile on`): a layer's two halves around attention, each one
`torch.compile` graph that serves every layer and every batch size.

What is compiled, and why that and not the whole step (as gpt-fast does):
- A layer's halves (`llama.attention_inputs`, `llama.attention_output_and_mlp`, or Gemma 3's) take
  the layer's weights as arguments (`llama.LayerWeights`), so the 30 layers of a model share one
  graph per half instead of unrolling into one graph thirty layers long; their shapes depend on
  the number of rows only, compiled with that dimension dynamic (`dynamic=True`), so SR's batch
  shrinking as it halts rows does not recompile.
- Attention stays eager: its key length grows by one every step, and this engine attends to the
  shared prompt KV and each row's own KV as slices, not as a full-length masked cache. A dynamic
  length over the whole step takes over 14 minutes to compile on a 2-core CPU.
- Prefill and sampling stay eager (one call per prompt; the sampler's random draw takes a
  `torch.Generator`, which a graph would break on).
- Inductor on a CPU and on CUDA alike; no CUDA graphs: a CUDA graph replays into the same output
  buffers, and a layer half's output is the next layer's input (it would be overwritten by the
  next replay).

Outputs differ from eager, so a compiled run's record says so (`params.compiled`). In float32 the
difference is in the last bits (fused ops round differently) and the sampled tokens were the same
in the tests. In bfloat16 it is larger: a fused graph keeps in float32 what the eager ops round to
bfloat16 after every op, so a token's log-prob moves by about 0.02 nats (median) and, at
temperature 1, a response's tokens part from the eager ones after 4 tokens (median;
docs/results.md, "The default study compiled").
"""

from __future__ import annotations

import torch


def decode_steps(steps: tuple) -> tuple:
    """`steps` (a forward pass's layer halves) compiled, for decode."""
    return tuple(torch.compile(step, dynamic=True, fullgraph=True) for step in steps)


COMPILE_SETTINGS = ("auto", "on", "off")


def resolve_compile(setting: str, fast_path: bool, device: torch.device) -> bool:
    """Whether the decode step runs compiled: --compile `setting` for a model on `device`, whose
    forward pass is the engine's own (`fast_path`) or the fallback (never compiled).

    auto: eager on every device. On this project's CPU the compiled step was measured no faster
    in a study job once its compile is paid (docs/results.md, "A compiled decode step"); on CUDA
    no measurement backs it (`make gpu-check` measures it where a GPU is lent), and auto does not
    assume what was not measured."""
    from ..errors import SpecrejError, shown

    if setting not in COMPILE_SETTINGS:
        raise SpecrejError(f"--compile must be one of {', '.join(COMPILE_SETTINGS)}, got {shown(setting)}")
    if setting == "on" and not fast_path:
        raise SpecrejError("--compile on: only the engine's own forward passes compile (Llama, Mistral, Qwen2, "
                           "Qwen3, Gemma 3); this model runs through the fallback (use --compile off or auto)")
    return setting == "on"
