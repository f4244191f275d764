"""The fallback forward pass: any Hugging Face causal LM through its own forward and its own cache.

`engine.forward_pass` uses it for every architecture the engine's own forward pass
(`engine.FAST_PATHS`) does not know: Gemma 2, Phi-3, OLMo, GPT-NeoX, GPT-2, Jamba, Mamba, ... The
model computes attention, positions, masks and sliding windows itself over the cache class it
builds itself (for most models a `transformers.DynamicCache` whose layers are full or
sliding-window as the config says; linear-attention layers of hybrid models keep their state in
the same object). `HFForward` implements `decoding.ForwardPass` and `HFRowCache` implements
`decoding.RowCache`, so `Rollout`, the sampler, the log-probs, SR and Best-of-N run unchanged.
"""

from __future__ import annotations

import inspect

import torch

from ..errors import SpecrejError
from .budget import check_context
from .hf_cache import HFPromptCache, HFRowCache, _layer_bytes, shares_prompt


class HFForward:
    """`decoding.ForwardPass` through a Hugging Face causal LM's own forward and cache class.

    Prefill: the whole causal LM runs the prompt once at batch 1 (`logits_to_keep=1`) and builds
    its own default cache; a hook on the output embedding takes the last token's hidden state.
    On the first prompt that hidden state is checked to be the decoder's own output and
    `logits(hidden)` the model's own logits: a model whose head does something `logits` does not
    reproduce is refused with a SpecrejError, not decoded wrong.
    Decode: the decoder (`model.base_model`) runs one token per row over that cache, expanded to
    the rows (`HFRowCache`); `logits` applies the output embedding and the known head
    post-processing (Gemma's final soft-capping, Cohere's logit_scale, Granite's logits_scaling).
    Sampling, log-probs and pruning are the engine's own, as with the fast path.

    Memory (`HFFootprint`): `kv_bytes_per_token` is measured from the cache the model actually builds: per
    layer, the bytes it holds after a 2-token probe minus after a 1-token probe (for a
    sliding-window layer that is its growth below the window, an upper bound beyond it; state
    that does not grow with tokens, e.g. a linear-attention layer's, is `state_bytes`).

    What this path cannot honour as the fast path does, and how it keeps the semantics:
    - The shared prompt is shared only in plain full-attention layers (`SharedPromptLayer`);
      sliding-window and other layers hold each row's copy of the prompt's part (bounded by the
      window). The KV budget counts the prompt once, so `extra_cache_bytes` (those copies, plus
      one layer's prompt keys/values in flight) goes into the engine's memory margin, and
      `peak_kv_bytes` reports what the cache really held.
    - The fixed-position row layout: the model's cache grows by concatenation each step (a new
      tensor per layer, the old one freed), and `relayout` moves nothing (`max_len` is kept as
      bookkeeping, so SR decides at the same tokens as on the fast path).
    - Chunked decode: a step feeds all live rows at once (`chunked_decode = False`: the engine
      gives one chunk), since the model's cache is one batch; a step's activations therefore grow
      with the rows, and the engine's memory margin counts them for all rows.
    - Speed: the model's own modules (unfused projections, its mask construction, a cache
      concatenation per layer per step, the prompt's keys concatenated to the rows' own in every
      full-attention layer at every step) make it slower than the fast path.
    """

    kind = "hf"  # the fallback (decoding.ForwardPass.kind)
    chunked_decode = False  # the model's cache is one batch: forward_step takes all live rows at once

    def __init__(self, model):
        self.model = model.eval()
        self.config = model.config
        self.text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.model_type = model.config.model_type
        self.device, self.dtype = model.device, model.dtype
        self.decoder = model.base_model
        self.head = model.get_output_embeddings()
        if self.decoder is model or self.head is None:
            raise SpecrejError(f"cannot run {self.model_type!r}: no separate decoder and output embedding")
        self._cache_kwarg = _cache_kwarg(self.decoder.forward)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.max_positions = getattr(self.text_config, "max_position_embeddings", None)
        self._probe()
        self.layers = self._decoder_layers()
        self.footprint = HFFootprint(self)
        self._checked = False

    # -- set-up ----------------------------------------------------------------------------
    @torch.inference_mode()
    def _probe(self) -> None:
        """Sizes from the model itself: a 1- and a 2-token forward at batch 1 (see the class doc)."""
        sizes = []
        for length in (1, 2):
            ids = torch.zeros(1, length, dtype=torch.long, device=self.device)
            out = self.decoder(input_ids=ids, use_cache=True, output_hidden_states=True)
            cache = _output_cache(out)
            layers = getattr(cache, "layers", None) or [cache]
            sizes.append([_layer_bytes(layer) for layer in layers])
            hidden = out.last_hidden_state
        self.hidden_size = hidden.shape[-1]
        # every layer's state, as output_hidden_states gives it (0: the model does not give them)
        self.num_layer_states = len(out.hidden_states or ())
        self.vocab_size = self.head.weight.shape[0]
        self.num_cache_layers = len(getattr(cache, "layers", ()))
        # per layer: bytes per token of one row, and bytes that do not grow with tokens
        self.layer_kv_bytes = [max(0, two - one) for one, two in zip(*sizes)]
        self.layer_shares_prompt = [shares_prompt(layer) for layer in layers]
        self.state_bytes = sum(max(0, one - kv) for one, kv in zip(sizes[0], self.layer_kv_bytes))
        # per token of one row's prompt, the bytes each row holds a copy of (layers without a shared prompt)
        self.unshared_kv_bytes = sum(kv for kv, shared in zip(self.layer_kv_bytes, self.layer_shares_prompt)
                                     if not shared)

    def _decoder_layers(self):
        for name in ("layers", "h", "blocks", "block"):
            layers = getattr(self.decoder, name, None)
            if isinstance(layers, torch.nn.ModuleList) and len(layers):
                return layers
        return tuple(range(max(1, self.num_cache_layers)))

    # -- limits and sizes --------------------------------------------------------------------
    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        check_context(prompt_len, max_new_tokens, self.max_positions)

    def new_cache(self) -> HFRowCache:
        return HFRowCache(self)

    # -- forward -----------------------------------------------------------------------------
    def forward_prompt(self, token_ids: torch.Tensor, layer_states: torch.Tensor | None = None
                       ) -> tuple[HFPromptCache, torch.Tensor]:
        """The prompt token_ids [1, P] through the whole causal LM: its cache (an `HFPromptCache`)
        and the hidden state of its last token [1, H] that the output embedding takes;
        `layer_states` [num_layer_states, 1, H], if given, receives its last token's output_hidden_states."""
        captured, decoded = [], []
        hooks = [self.head.register_forward_pre_hook(lambda module, args: captured.append(args[0])),
                 self.decoder.register_forward_hook(lambda module, args, out: decoded.append(out.last_hidden_state))]
        try:
            kwargs = {"logits_to_keep": 1} if self._keeps_logits else {}
            out = self.model(input_ids=token_ids, use_cache=True, output_hidden_states=layer_states is not None,
                             **kwargs)
        finally:
            for hook in hooks:
                hook.remove()
        hidden = captured[-1][:, -1]
        if layer_states is not None:
            _copy_layer_states(out, layer_states)
        if not self._checked:
            self._check_logits(hidden, out.logits[:, -1], decoded[-1][:, -1] if decoded else None)
        return HFPromptCache(_output_cache(out), token_ids.shape[1]), hidden

    def forward_step(self, cache: HFRowCache, tokens: torch.Tensor, pos: int, first_row: int = 0,
                     layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [rows, 1] of every live row at generated position `pos` (no row chunks: see the
        class doc): the model's decoder over its cache, which it updates in place; `layer_states`
        [num_layer_states, rows, H], if given, receives the step's output_hidden_states."""
        if first_row != 0 or tokens.shape[0] != cache.rows:
            raise SpecrejError("the fallback forward pass decodes all live rows in one chunk")
        if pos != cache.length:
            raise SpecrejError(f"decode position {pos} but the cache holds {cache.length} generated tokens")
        out = self.decoder(input_ids=tokens, use_cache=True, output_hidden_states=layer_states is not None,
                           **{self._cache_kwarg: cache.cache})
        cache.cache = _output_cache(out)
        cache.stepped(pos)
        if layer_states is not None:
            _copy_layer_states(out, layer_states)
        return out.last_hidden_state[:, -1]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's head on hidden [rows, H], in the model's dtype, then fp32 [rows, vocab]."""
        logits = self.head(hidden)
        c = self.text_config
        softcap = getattr(c, "final_logit_softcapping", None)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        scale = getattr(self.model, "logit_scale", None)  # Cohere
        if isinstance(scale, (int, float)):
            logits = logits * scale
        scaling = getattr(c, "logits_scaling", None)  # Granite
        if scaling:
            logits = logits / scaling
        return logits.float()

    def _check_logits(self, hidden: torch.Tensor, expected: torch.Tensor, decoder_hidden: torch.Tensor | None) -> None:
        """Once: the decoder's last hidden state is what the head takes (decode steps run the
        decoder alone), and `logits` of it are the model's own logits."""
        if decoder_hidden is None or not torch.equal(decoder_hidden, hidden):
            raise SpecrejError(
                f"the fallback forward pass cannot run {self.model_type!r}: its head does not take "
                f"the decoder's last hidden state as it is")
        ours, theirs = self.logits(hidden), expected.float()
        tol = 1e-4 if self.dtype == torch.float32 else 2e-2
        if not torch.allclose(ours, theirs, atol=tol * max(1.0, theirs.abs().max().item()), rtol=0):
            raise SpecrejError(
                f"the fallback forward pass cannot reproduce {self.model_type!r}'s logits from its last "
                f"hidden state (the head post-processes them in a way the engine does not know)")
        self._checked = True


class HFFootprint:
    """An `HFForward`'s bytes beside its weights, as the memory budget counts them
    (`budget.Footprint`), from the sizes its probe measured: the KV per token (every layer's
    growth per token), the cache's bytes beside it, and bounds on the activations."""

    def __init__(self, forward: HFForward):
        c = forward.text_config
        self.hidden, self.vocab_size, self.num_layers = forward.hidden_size, forward.vocab_size, len(forward.layers)
        self.heads = getattr(c, "num_attention_heads", None) or 1
        self.intermediate = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * self.hidden
        self.layer_kv_bytes, self.state_bytes = forward.layer_kv_bytes, forward.state_bytes
        self.unshared_kv_bytes = forward.unshared_kv_bytes
        self.kv_bytes_per_token = max(1, sum(self.layer_kv_bytes))

    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV,
        at 4 bytes an element: the residual stream and a dozen hidden-sized temporaries, the MLP's
        intermediate (4 copies), q/k/v, the attention scores and their soft-maxed copies over the
        context (5 x heads x context); plus the cache's own transient: one layer's keys and values
        twice (the model's update concatenates the new token to a layer's old tensor)."""
        per_layer_kv = self.kv_bytes_per_token // max(1, self.num_layers)
        return (4 * (12 * self.hidden + 4 * self.intermediate + 3 * self.heads * 256 + 5 * self.heads * context_len)
                + 2 * per_layer_kv * context_len)

    def prefill_bytes(self, prompt_len: int) -> int:
        """The prompt's activations in `forward_prompt`, its attention scores, the model's own
        prompt cache and its logits of the last token."""
        return (prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.heads * prompt_len**2
                + prompt_len * self.kv_bytes_per_token + 8 * self.vocab_size)

    def extra_cache_bytes(self, prompt_len: int, rows: int) -> int:
        """Cache bytes beside the budget (which counts the prompt once): each row's own copy of the
        prompt in the layers that do not share it (sliding-window and other non-plain layers; 0
        for a model whose layers are all full attention), any per-row state that does not grow
        with tokens, and the prompt's part of one layer's keys and values in flight (the shared
        layer's update hands the attention cat(prompt, own) for all rows, one layer at a time)."""
        in_flight = prompt_len * max(self.layer_kv_bytes, default=0)
        return rows * (prompt_len * self.unshared_kv_bytes + self.state_bytes + in_flight)


def _copy_layer_states(out, layer_states: torch.Tensor) -> None:
    """The last position of each of the model's output_hidden_states into layer_states [L, rows, H]."""
    for buffer, state in zip(layer_states, out.hidden_states, strict=True):
        buffer.copy_(state[:, -1])


def _cache_kwarg(forward) -> str:
    """transformers 5 calls the cache argument `cache`; earlier versions `past_key_values`."""
    params = inspect.signature(forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _output_cache(out):
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "reorder_cache"):
        raise SpecrejError("the model returned no transformers Cache (use_cache=True); the fallback needs one")
    return cache

