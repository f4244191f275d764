"""The fallback's cache: the prompt's KV as the model's own cache object holds it (`HFPromptCache`),
shared by the rows, and the rows' cache over it (`HFRowCache`, a `decoding.RowCache`), with the
byte counts the memory budget needs."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import torch

from .budget import storage_bytes


@dataclass
class HFPromptCache:
    """The prefilled prompt as the fallback holds it (`HFForward`'s `decoding.PromptState`, for
    `HFRowCache.share_prompt`): the model's own cache object of the prompt at batch 1, which
    `HFRowCache.allocate` expands to the rows and nothing modifies."""

    cache: object
    prompt_len: int


def cache_tensors(cache) -> list[torch.Tensor]:
    """Every tensor a transformers cache holds (keys, values, linear-attention states...)."""
    found = []

    def walk(obj, depth):
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif depth < 3 and isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for item in obj.values():
                walk(item, depth + 1)

    for layer in getattr(cache, "layers", None) or [cache]:
        walk({k: v for k, v in vars(layer).items() if not k.startswith("_sliding_window")}, 0)
    return found


def _layer_bytes(layer) -> int:
    return storage_bytes(cache_tensors(_OneLayer(layer)))


class _OneLayer:
    def __init__(self, layer):
        self.layers = [layer]


@functools.cache
def shared_prompt_layer_class():
    """`SharedPromptLayer`, a transformers cache layer class, made on first use (importing
    specrej does not import transformers)."""
    from transformers.cache_utils import DynamicLayer

    class SharedPromptLayer(DynamicLayer):
        """A full-attention layer of the rows' cache whose prompt keys/values [1, kv_heads, P, d]
        are shared by every row (one copy, as in the fast path's `cache.KVCache`): the layer
        holds only the rows' own tokens [rows, kv_heads, t, d]; `update` appends the new token to
        them and hands the attention cat(prompt expanded to the rows, own), a transient of one
        layer that is freed once the layer's attention is done."""

        def __init__(self, prompt_keys: torch.Tensor, prompt_values: torch.Tensor, rows: int):
            super().__init__()
            self.prompt_keys, self.prompt_values = prompt_keys, prompt_values
            self.keys = prompt_keys.new_empty((rows, prompt_keys.shape[1], 0, prompt_keys.shape[3]))
            self.values = prompt_values.new_empty((rows, prompt_values.shape[1], 0, prompt_values.shape[3]))
            self.device, self.dtype, self.is_initialized = prompt_keys.device, prompt_keys.dtype, True

        def update(self, key_states, value_states, *args, **kwargs):
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
            rows = self.keys.shape[0]
            return (torch.cat([self.prompt_keys.expand(rows, -1, -1, -1), self.keys], dim=-2),
                    torch.cat([self.prompt_values.expand(rows, -1, -1, -1), self.values], dim=-2))

        def get_seq_length(self) -> int:
            return self.prompt_keys.shape[-2] + self.keys.shape[-2]

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.keys = self.keys.index_select(0, beam_idx.to(self.keys.device))
            self.values = self.values.index_select(0, beam_idx.to(self.values.device))

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self.keys, self.values = self.keys[indices, ...], self.values[indices, ...]

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.keys = self.keys.repeat_interleave(repeats, dim=0)
            self.values = self.values.repeat_interleave(repeats, dim=0)

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("a shared-prompt layer is not cropped")

    return SharedPromptLayer


def shares_prompt(layer) -> bool:
    """Whether `expand_cache` gives this layer of the model's cache a shared prompt: a plain
    full-attention `DynamicLayer` (a sliding-window, linear-attention or other layer keeps its
    own class, and each row its own copy of the prompt's part in it)."""
    from transformers.cache_utils import DynamicLayer

    return type(layer) is DynamicLayer


class HFRowCache:
    """The rows' cache for `HFForward`: the model's own cache object, batch = the live rows.

    - `share_prompt` keeps the prompt's cache (batch 1, never modified: several batches of
      Best-of-N start from it).
    - `allocate(rows, max_len)` expands it to `rows` without re-running the prompt
      (`expand_cache`): each plain full-attention layer becomes a `SharedPromptLayer` that keeps
      the prompt's keys/values once, for every row, and holds only the rows' own tokens; a
      sliding-window layer (or another key/value layer class) gets stride-0 `expand` views of
      the prompt's tensors (no copy) that its own `update` (torch.cat) turns into each row's
      copy at the first step (at most window - 1 tokens per row); a layer with other state
      (linear attention) is expanded by its own `reorder_cache` on index 0 repeated.
    - `prune(order)` is the cache's own `reorder_cache(order)`: an index_select on the batch
      dimension of every layer (no re-prefill).
    - `max_len` is bookkeeping only: the model's cache grows by itself, so `relayout` moves
      nothing; `max_len` still tells `Rollout.needs_room` when SR's memory runs short, so the
      decisions are the same as with the fast path's static cache.
    - `peak_bytes`: the storages the cache really holds (each storage once: the shared prompt
      once), plus, at each step and prune, one layer in flight (its old and new tensors side by
      side, and the prompt + own keys/values handed to the attention).
    """

    def __init__(self, forward):  # the hf_forward.HFForward that made it
        self.forward = forward
        self.prompt = None
        self.cache = None
        self.rows = 0
        self.length = 0  # generated tokens held per live row
        self.peak_bytes = 0
        self._max_len = 0
        self._prompt_len = 0

    @property
    def max_len(self) -> int:
        return self._max_len

    @property
    def prompt_len(self) -> int:
        return self._prompt_len

    @property
    def allocated_bytes(self) -> int:
        tensors = cache_tensors(self.prompt) if self.prompt is not None else []
        if self.cache is not None:
            tensors += cache_tensors(self.cache)
        return storage_bytes(tensors)

    def _track(self, transient: int = 0) -> None:
        self.peak_bytes = max(self.peak_bytes, self.allocated_bytes + transient)

    def _largest_layer_bytes(self) -> int:
        layers = getattr(self.cache, "layers", None) or []
        return max((_layer_bytes(layer) for layer in layers), default=0)

    def share_prompt(self, prompt: HFPromptCache) -> None:
        self.prompt, self._prompt_len = prompt.cache, prompt.prompt_len
        self._track()

    def allocate(self, rows: int, max_len: int) -> None:
        self.cache = expand_cache(self.prompt, rows)
        self.rows, self.length, self._max_len = rows, 0, max_len
        self._track()

    def prune(self, order: torch.Tensor) -> None:
        if order.numel() == self.rows and torch.equal(order, torch.arange(self.rows, device=order.device)):
            return
        transient = self._largest_layer_bytes()  # a layer's old tensors until its new ones are made
        self.cache.reorder_cache(order)
        self.rows = order.numel()
        self._track(transient)

    def relayout(self, max_len: int) -> None:
        assert max_len >= self.length
        self._max_len = max_len

    def stepped(self, pos: int) -> None:
        """After a decode step: the peak includes one layer in flight, the larger of its old
        tensors (beside the new ones while its update concatenates) and the keys/values a
        shared-prompt layer's update hands the attention (prompt included; the old ones are freed
        by then)."""
        self.length = pos + 1
        in_flight = self.rows * (self._prompt_len + self.length) * max(self.forward.layer_kv_bytes, default=0)
        self._track(transient=max(self._largest_layer_bytes(), in_flight))

    def free(self) -> None:
        self.prompt = self.cache = None
        self.rows = self.length = 0


def expand_cache(prompt_cache, rows: int):
    """A new cache object holding the batch-1 prompt cache's content for `rows` rows."""
    tensors = cache_tensors(prompt_cache)
    index = torch.zeros(rows, dtype=torch.long, device=tensors[0].device if tensors else None)
    if not isinstance(getattr(prompt_cache, "layers", None), list):  # a cache without layers: its own index_select
        cache = copy.deepcopy(prompt_cache)
        cache.reorder_cache(index)
        return cache
    cache = copy.copy(prompt_cache)
    cache.layers = []
    for layer in prompt_cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if shares_prompt(layer) and isinstance(keys, torch.Tensor) and keys.dim() == 4:
            cache.layers.append(shared_prompt_layer_class()(keys, values, rows))
            continue
        others = [t for t in cache_tensors(_OneLayer(layer)) if t is not keys and t is not values and t.dim()]
        if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and not others:
            layer = copy.copy(layer)
            if keys.numel():
                layer.keys, layer.values = keys.expand(rows, *keys.shape[1:]), values.expand(rows, *values.shape[1:])
        elif others:  # other state (linear attention, indexers): the layer's own index_select, on a deep copy
            layer = copy.deepcopy(layer)
            layer.reorder_cache(index)
        else:
            layer = copy.copy(layer)
        cache.layers.append(layer)
    return cache


