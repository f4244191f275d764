"""Static KV cache for rows that decode in lock-step from one shared prompt.

Layout per layer (gpt-fast style, explicit tensors):
  prompt_k/v[layer]  [kv_heads, prompt_len, head_dim]   prefilled once, shared by every row
  k/v[layer]         [rows, kv_heads, max_len, head_dim] generated tokens, preallocated

Rows decode in lock-step, so every live row holds the same number of generated tokens
(`length`); finished or halted rows are pruned out, never masked. Slots not yet written hold
zeros: the compiled step (`compiled.StaticDecodeStep`) reads the whole buffer and masks them,
and a masked garbage NaN would still poison its sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .budget import storage_bytes


def compaction_order(keep: torch.Tensor) -> torch.Tensor:
    """Row order after dropping rows where `keep` is False, moving as few rows as possible.

    Survivors already in the first `n_keep` slots stay put; survivors beyond fill the holes.
    Row order carries no meaning (each row's candidate id travels with it), so this turns a
    prune into a copy of only the rows that must move.
    """
    survivors = keep.nonzero().flatten()
    n_keep = survivors.numel()
    order = torch.arange(n_keep, device=keep.device)
    holes = (~keep[:n_keep]).nonzero().flatten()
    order[holes] = survivors[survivors >= n_keep]
    return order


def moved_rows(order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst): the rows that `order` (new row j is old row order[j]) actually moves, so a
    buffer is compacted in place by copying buf[src] into buf[dst] and nothing else."""
    slots = torch.arange(order.numel(), device=order.device)
    moved = order != slots
    return order[moved], slots[moved]


@dataclass
class PromptKV:
    """The prefilled prompt's KV as `KVCache.share_prompt` takes it (`llama.LlamaForward`'s
    `decoding.PromptState`): per layer, k and v [kv_heads, prompt_len, head_dim]."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @property
    def prompt_len(self) -> int:
        return self.k[0].shape[1]


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 spare_slots: int = 0):
        """`spare_slots`: each row's buffer holds that many slots past `max_len`, never written (the
        compiled step's attention reads a slice of the buffer that is then never the whole of it)."""
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.spare_slots = spare_slots
        self.dtype, self.device = dtype, device
        self.prompt_k: list[torch.Tensor] = []
        self.prompt_v: list[torch.Tensor] = []
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.rows = 0  # live rows; the leading rows of k/v
        self.length = 0  # generated tokens held per live row
        self.peak_bytes = 0

    # -- sizes ---------------------------------------------------------------------------
    @property
    def max_len(self) -> int:
        return self.k[0].shape[2] - self.spare_slots if self.k else 0

    @property
    def prompt_len(self) -> int:
        return self.prompt_k[0].shape[1]

    @property
    def allocated_bytes(self) -> int:
        return storage_bytes(self.prompt_k + self.prompt_v + self.k + self.v)

    def _track(self, transient: int = 0) -> None:
        self.peak_bytes = max(self.peak_bytes, self.allocated_bytes + transient)

    # -- filling -------------------------------------------------------------------------
    def share_prompt(self, prompt: PromptKV) -> None:
        """Attach the prefilled prompt KV (one copy, whatever the number of rows)."""
        self.prompt_k, self.prompt_v = prompt.k, prompt.v
        self._track()

    def free(self) -> None:
        """Drop the buffers (and this cache's reference to the prompt KV); `peak_bytes` stays."""
        self.prompt_k, self.prompt_v, self.k, self.v = [], [], [], []
        self.rows = self.length = 0

    def allocate(self, rows: int, max_len: int) -> None:
        shape = (rows, self.num_kv_heads, max_len + self.spare_slots, self.head_dim)
        self.k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.num_layers)]
        self.v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.num_layers)]
        self.rows, self.length = rows, 0
        self._track()

    # -- shrinking and growing -----------------------------------------------------------
    def prune(self, order: torch.Tensor) -> None:
        """Keep rows `order` (new row j is old row order[j]); copies only rows that move."""
        src, dst = moved_rows(order)
        if src.numel():
            per_layer_row = self.num_kv_heads * self.length * self.head_dim * self.k[0].element_size()
            self._track(transient=src.numel() * per_layer_row)  # the gathered rows of one buffer
            for layer in range(self.num_layers):
                for buf in (self.k[layer], self.v[layer]):
                    buf[dst, :, : self.length] = buf[src, :, : self.length]
        self.rows = order.numel()

    def relayout(self, max_len: int) -> None:
        """Re-lay out the live rows with room for `max_len` tokens each (after rows were halted).

        One layer at a time, each old buffer freed as its new one is filled, so the transient
        is one layer (budget.token_capacity holds that back).
        """
        assert max_len >= self.length
        shape = (self.rows, self.num_kv_heads, max_len + self.spare_slots, self.head_dim)
        for layer in range(self.num_layers):
            for bufs in (self.k, self.v):
                fresh = torch.zeros(shape, dtype=self.dtype, device=self.device)
                fresh[:, :, : self.length] = bufs[layer][: self.rows, :, : self.length]
                self._track(transient=fresh.numel() * fresh.element_size())
                bufs[layer] = fresh
        self._track()
