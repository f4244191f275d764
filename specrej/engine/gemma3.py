"""The engine's own forward pass for Gemma 3 text decoders (`Gemma3ForCausalLM`), gpt-fast style.

Built on `llama.LlamaForward`'s pieces: the fused q/k/v and gate/up GEMMs, the prompt's KV run once
and shared by every row (`llama.attend_decode`), each row's own KV in a static `cache.KVCache`.
What Gemma 3 adds, as transformers' `modeling_gemma3` computes it:

- the embedding is scaled by sqrt(hidden) (the embedding module does it, in the weights' dtype);
- RMSNorm in float32 times (1 + weight), cast back; four per layer (input, post-attention,
  pre- and post-feedforward) and one on each head's q and k before the rotation;
- attention scaled by query_pre_attn_scalar ** -0.5, a gelu-tanh gated MLP;
- two rotary embeddings (one per layer type: "sliding_attention" layers use the local base
  frequency, "full_attention" layers the global one);
- sliding layers: a query at position p sees the keys at positions p - sliding_window < j <= p
  (transformers' `sliding_window_overlay`); the other layers see every earlier key;
- the final logits soft-capped, tanh(logits / c) * c, when final_logit_softcapping is set.

Rows decode in lock-step, so every row's query is at the same position and a sliding layer's
window is a slice of the prompt KV and of the rows' own KV, not a mask. The cache still keeps every
token of every layer (what the KV budget counts), not a ring buffer of the window.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import SpecrejError
from .llama import LlamaForward, rotate

SUPPORTED_MODEL_TYPES = ("gemma3_text",)  # the model types Gemma3Forward runs
LAYER_TYPES = ("sliding_attention", "full_attention")


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm as PyTorch's fused kernel: in float32, times `weight` (the module's 1 + weight,
    precomputed in float32), cast back to x's dtype (Gemma3RMSNorm: (x * w).to(dtype), not x.to(dtype) * w)."""
    return F.rms_norm(x.float(), weight.shape, weight, eps).to(x.dtype)


def _plus_one(norm) -> torch.Tensor:
    return 1.0 + norm.weight.detach().float()


class Gemma3Forward(LlamaForward):
    """The forward pass of a Hugging Face Gemma 3 text causal LM over a `KVCache`.

    Inherits LlamaForward's fused projections, cache and sizes (`kind` "llama": the engine's own
    forward pass, as the records and flops.py know it); the layer, the attention windows and the
    logits are Gemma 3's."""

    def __init__(self, model):
        config = model.config
        if getattr(config, "use_bidirectional_attention", False):
            raise SpecrejError("Gemma 3 with bidirectional attention is an encoder, not a generator")
        unknown = sorted(set(config.layer_types) - set(LAYER_TYPES))
        if unknown:
            raise SpecrejError(f"Gemma 3 layer types {unknown} are not known to the engine's forward pass")
        super().__init__(model)
        self.layer_types = list(config.layer_types[: len(self.layers)])
        self.is_sliding = [t == "sliding_attention" for t in self.layer_types]
        self.sliding_window = config.sliding_window if any(self.is_sliding) else None
        self.final_logit_softcapping = config.final_logit_softcapping
        # transformers' Gemma 3 attention takes no attn_logit_softcapping (the config field is
        # ignored there: q/k norms replaced it), so neither does this one
        self.eps = config.rms_norm_eps
        # the norms' 1 + weight in float32, once (Gemma3RMSNorm adds it at every call):
        # per layer (input, post-attention, pre-feedforward, post-feedforward, q, k)
        self.norm_weights = [
            tuple(_plus_one(norm) for norm in (layer.input_layernorm, layer.post_attention_layernorm,
                                               layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm,
                                               layer.self_attn.q_norm, layer.self_attn.k_norm))
            for layer in self.layers]
        self.final_norm_weight = _plus_one(model.model.norm)

    # -- limits and sizes ----------------------------------------------------------------
    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        """The context length only: the sliding layers attend to their window at any length."""
        total = prompt_len + max_new_tokens
        if total > self.max_positions:
            raise SpecrejError(
                f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the "
                f"model's context of {self.max_positions} tokens"
            )

    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV,
        counted at 4 bytes an element (the float32 copies that the norms make of a 16-bit model's
        states included): the residual stream, a norm's float32 input and output and its cast, the
        o_proj / down_proj output and the new residual (8 x hidden); the fused qkv output, the
        normed q and k with their float32 copies, the rotated copies and the rotation's
        temporaries (8 x qkv); the gate/up output, activation and product (4 x intermediate); the
        attention scores, their scaled and soft-maxed copies and the re-laid-out prompt part
        (5 x heads x context); the cos and sin of both rotary embeddings (4 x head_dim)."""
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        return 4 * (8 * self.hidden_size + 8 * qkv + 4 * self.config.intermediate_size
                    + 5 * self.num_heads * context_len + 4 * self.head_dim)

    def prefill_bytes(self, prompt_len: int) -> int:
        """Upper bound on the prompt's activations in `forward_prompt`, its attention scores, and the
        sliding layers' mask (bool, and the float copy SDPA makes of it)."""
        return (prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.num_heads * prompt_len**2
                + 5 * prompt_len**2)

    # -- attention windows -----------------------------------------------------------------
    def prompt_masks(self, seq: int) -> list[torch.Tensor | None]:
        """The sliding layers' mask once the prompt is longer than the window (query i sees key j
        for i - window < j <= i); within the window, and on full layers, the causal one (None)."""
        if self.sliding_window is None or seq <= self.sliding_window:
            return [None] * len(self.layers)
        i = torch.arange(seq, device=self.device)
        window = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.sliding_window)
        return [window if sliding else None for sliding in self.is_sliding]

    def first_visible(self, layer: int, query_pos: int) -> int:
        """A sliding layer's query at `query_pos` sees the last `sliding_window` positions; a full layer every one."""
        return max(0, query_pos - self.sliding_window + 1) if self.is_sliding[layer] else 0

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 [rows, vocab]: the lm_head output, soft-capped as transformers does (in the model's
        dtype; in place, so the cap costs no copy of the logits)."""
        logits = self.model.lm_head(hidden)
        cap = self.final_logit_softcapping
        if cap is not None:
            logits.div_(cap).tanh_().mul_(cap)
        return logits.float()

    def _forward(self, token_ids: torch.Tensor, first_pos: int, attend: Callable,
                 layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """Run the transformer on token_ids [rows, seq] at positions first_pos...; `attend(layer,
        q, k, v)` supplies attention. Returns the final (normed) hidden state of the last position,
        [rows, hidden].

        `layer_states` [len(layers) + 1, rows, hidden], if given, receives the last position's state
        as transformers' output_hidden_states gives it: the (scaled) embedding output, each layer's
        output but the last, and the final normed state."""
        rows, seq = token_ids.shape
        heads, kv_heads, eps = self.num_heads, self.num_kv_heads, self.eps
        x = self.model.get_input_embeddings()(token_ids)  # Gemma3TextScaledWordEmbedding: times sqrt(hidden)
        positions = torch.arange(first_pos, first_pos + seq, device=self.device)[None]
        rotary = {  # per layer type: cos, sin [1, seq, 1, d]
            layer_type: tuple(t[:, :, None] for t in self.model.model.rotary_emb(x, positions, layer_type))
            for layer_type in set(self.layer_types)}
        for i, layer in enumerate(self.layers):
            if layer_states is not None:
                layer_states[i].copy_(x[:, -1])
            input_norm, post_attention_norm, pre_feedforward_norm, post_feedforward_norm, q_norm, k_norm = \
                self.norm_weights[i]
            cos, sin = rotary[self.layer_types[i]]
            h = gemma_rms_norm(x, input_norm, eps)
            qkv = F.linear(h, self.qkv_weight[i], self.qkv_bias[i]).view(rows, seq, -1, self.head_dim)
            q = rotate(gemma_rms_norm(qkv[:, :, :heads], q_norm, eps), cos, sin).transpose(1, 2)
            k = rotate(gemma_rms_norm(qkv[:, :, heads : heads + kv_heads], k_norm, eps), cos, sin).transpose(1, 2)
            v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
            out = attend(i, q, k, v)  # [rows, heads, seq, d]
            out = layer.self_attn.o_proj(out.transpose(1, 2).reshape(rows, seq, -1))
            x = x + gemma_rms_norm(out, post_attention_norm, eps)
            h = gemma_rms_norm(x, pre_feedforward_norm, eps)
            gate, up = F.linear(h, self.gate_up_weight[i], self.gate_up_bias[i]).chunk(2, dim=-1)
            x = x + gemma_rms_norm(layer.mlp.down_proj(layer.mlp.act_fn(gate) * up), post_feedforward_norm, eps)
        hidden = gemma_rms_norm(x[:, -1], self.final_norm_weight, eps)
        if layer_states is not None:
            layer_states[-1].copy_(hidden)
        return hidden
