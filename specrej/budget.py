"""Memory accounting: how many rows x generated tokens of KV cache fit in a byte budget.

The KV cache is the memory that grows with the batch and the response length (weights and
activations do not), so Speculative Rejection's "memory runs short" is the moment when
rows x tokens of KV would exceed the budget.
"""

from __future__ import annotations

import math
import os
import re

import torch

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_size(text: str | int) -> int:
    """'2GiB' -> 2147483648, '512MB' -> 512000000, 1000 -> 1000."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a memory size: {text!r} (examples: 2GiB, 512MiB, 1.5GB, 1000000)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(num_bytes) < 1024 or unit == "TiB":
            return f"{num_bytes:.1f} {unit}" if unit != "B" else f"{int(num_bytes)} B"
        num_bytes /= 1024
    raise AssertionError("unreachable")


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of K and V that one token of one row occupies across all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def default_memory_budget(device: torch.device) -> int:
    """KV budget when none is given.

    CUDA: free memory (measured after the models are loaded) minus a margin for activations and
    logits (10% of the card, at least 2 GiB). CPU: a quarter of the available RAM, at most
    1 GiB: SR's initial batch grows with the budget, and on a CPU a larger one costs minutes
    per prompt (pass --memory-budget to choose).
    """
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return max(0, free - max(2 * 2**30, total // 10))
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(available // 4, 2**30)


def token_capacity(budget_bytes: int, kv_bytes: int, prompt_tokens: int, num_layers: int) -> int:
    """Generated-token slots (rows x tokens) that fit beside the shared prompt KV.

    One layer's worth is held back: re-laying out the cache (growing it after rows were
    halted) copies one layer at a time into a fresh buffer, and that transient must fit too.
    """
    usable = budget_bytes - prompt_tokens * kv_bytes
    return max(0, math.floor(usable / kv_bytes * num_layers / (num_layers + 1)))
