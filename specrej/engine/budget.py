"""Memory accounting: how many rows x generated tokens of KV cache fit in a byte budget, and
the measured peak beside it.

The KV cache is the memory that grows with the batch and the response length, so Speculative
Rejection's "memory runs short" is the moment when rows x tokens of KV would exceed the budget.
Everything else a prompt's run allocates is bounded by `Engine.memory_margin` (working memory
of one decode chunk and one sampling chunk, the prefill, and a few bytes per row), and
`PeakMemory` measures what was really allocated, so the two can be checked against each other.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import SpecrejError

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


def check_context(prompt_len: int, max_new_tokens: int, max_positions: int | None) -> None:
    """SpecrejError when a prompt and its longest response exceed the model's context
    (`max_positions`; None: no limit known)."""
    if max_positions and prompt_len + max_new_tokens > max_positions:
        raise SpecrejError(f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the "
                           f"model's context of {max_positions} tokens")


class Footprint(Protocol):
    """The bytes a forward pass allocates beside its weights, as the memory budget counts them
    (`decoding.ForwardPass.footprint`; `Engine.memory_margin` adds them up)."""

    kv_bytes_per_token: int  # KV bytes of one token of one row, all layers

    def decode_row_bytes(self, context_len: int) -> int: ...  # one row's activations in a step

    def prefill_bytes(self, prompt_len: int) -> int: ...  # the prompt's activations in forward_prompt

    def extra_cache_bytes(self, prompt_len: int, rows: int) -> int:
        """Bytes the cache of `rows` rows holds beyond what the KV budget counts (the prompt once,
        kv_bytes_per_token per generated token of each row), e.g. rows' own copies of the prompt;
        0 for a cache that holds exactly that (`cache.KVCache`)."""


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of K and V that one token of one row occupies across all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the storages behind `tensors`, each counted once: a view keeps its whole storage
    alive (numel x element size would undercount it), and an expanded view is its one storage."""
    storages = {}
    for t in tensors:
        if t.numel():
            storage = t.untyped_storage()
            storages[storage._cdata] = storage.nbytes()
    return sum(storages.values())


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


@dataclass(frozen=True)
class TokenBudget:
    """The KV budget as generated-token slots (rows x tokens, `token_capacity`): the one place
    that says how many rows and tokens fit."""

    capacity: int

    def fits(self, rows: int, length: int) -> bool:
        """`rows` rows of `length` generated tokens each fit."""
        return rows * length <= self.capacity

    def rows_that_fit(self, length: int) -> int:
        """The most rows that fit `length` tokens each."""
        return self.capacity // length

    def row_length(self, rows: int, max_new_tokens: int) -> int:
        """Room per row for `rows` rows: as much as the budget gives each, at most max_new_tokens."""
        return min(max_new_tokens, self.capacity // rows)


class PeakMemory:
    """Context manager: the peak of memory allocated while it is active, above what was allocated
    on entry (`peak_bytes`, set on exit).

    CUDA: `torch.cuda.max_memory_allocated` (the caching allocator's count of bytes handed out,
    whatever allocated them: our tensors, cuBLAS / attention workspaces, the reward model), minus
    `memory_allocated` on entry. Nested meters on one device work: an inner meter's reset of the
    peak statistics is carried over to the outer ones first.

    CPU: `StorageTracker`, the storages of the tensors that ATen ops create while the meter is
    active, each counted from its creation until it is freed. It sees every tensor the engine,
    the sampler, the cache and a reward model allocate, at op granularity; it does not see
    scratch that a kernel allocates and frees inside one op (oneDNN / MKL workspaces and
    packing buffers, SDPA's internal blocks), the allocator's own overhead, nor Python objects
    (token lists, texts).
    """

    _active_cuda: list["PeakMemory"] = []

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.peak_bytes = 0

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            for outer in self._active_cuda:  # keep what the outer meters saw before our reset
                if outer.device == self.device:
                    outer._carried = max(outer._carried, torch.cuda.max_memory_allocated(self.device) - outer._base)
            self._base = torch.cuda.memory_allocated(self.device)
            self._carried = 0
            torch.cuda.reset_peak_memory_stats(self.device)
            self._active_cuda.append(self)
        else:
            self._tracker = StorageTracker()
            self._tracker.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._active_cuda.remove(self)
            self.peak_bytes = max(self._carried, torch.cuda.max_memory_allocated(self.device) - self._base)
        else:
            self._tracker.__exit__(*exc_info)
            self.peak_bytes = self._tracker.peak_bytes


class StorageTracker(TorchDispatchMode):
    """Live and peak bytes of the tensor storages that ATen ops allocate while the mode is active.

    Each op's outputs that its schema says are new tensors (not aliases of an input: views,
    in-place and out= results are not allocations) are counted with their storage's byte size,
    once per storage, until the storage is freed (a weak reference to the storage tells). The
    peak is taken after each op, so it includes an op's inputs and outputs but not scratch the
    kernel frees before returning. Frees are looked up lazily: only when the upper bound of the
    live bytes could set a new peak, so most ops cost one dictionary lookup.
    """

    def __init__(self):
        super().__init__()
        from torch.multiprocessing.reductions import StorageWeakRef

        self._weak_ref = StorageWeakRef
        self._live: dict[int, tuple[object, int]] = {}  # storage address -> (weak ref, bytes)
        self._fresh: dict[object, tuple[bool, ...]] = {}  # op -> whether each return is a new tensor
        self.live_bytes = 0  # an upper bound: frees are subtracted at the next sweep
        self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        fresh = self._fresh.get(func)
        if fresh is None:
            # torch.tensor(data) is built outside the dispatcher, then passed through lift_fresh
            fresh = tuple(r.alias_info is None or func is _LIFT_FRESH for r in func._schema.returns)
            self._fresh[func] = fresh
        if True in fresh:
            outs = (out,) if len(fresh) == 1 else out
            storages = {s._cdata: s for is_new, o in zip(fresh, outs) if is_new for s in _storages(o)}
            new = [(s, s.nbytes()) for key, s in storages.items() if key not in self._live or self._expired(key)]
            added = sum(n for _, n in new)
            if self.live_bytes + added > self.peak_bytes or len(self._live) > 4096:
                self._sweep()
            for s, n in new:
                self._live[s._cdata] = (self._weak_ref(s), n)
                self.live_bytes += n
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return out

    def _expired(self, key: int) -> bool:
        ref, n = self._live[key]
        if not ref.expired():
            return False
        del self._live[key]
        self.live_bytes -= n
        return True

    def _sweep(self) -> None:
        for key in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.live_bytes -= self._live.pop(key)[1]


_LIFT_FRESH = torch.ops.aten.lift_fresh.default


def _storages(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out.untyped_storage()] if out.layout == torch.strided and out.device.type != "meta" else []
    if isinstance(out, (list, tuple)):
        return [s for o in out for s in _storages(o)]
    return []
