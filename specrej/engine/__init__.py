"""Running a model, gpt-fast style: `engine.Engine` (a model with its tokenizer, stop tokens and
memory bounds), the engine's own forward passes (`llama`, `gemma3`) and the fallback for any other
causal LM (`hf_forward`), the static KV cache (`cache`), sampling (`sampling`), `prefill` /
`decode_one_token` / `decode_rollout` and the per-row scheduler `Rollout` (`decoding`), and the
memory budget (`budget`). `Engine` is imported lazily: `budget` alone loads no model code."""

import importlib


def __getattr__(name):
    if name in ("Engine", "FAST_PATHS", "forward_pass"):
        return getattr(importlib.import_module(".engine", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
