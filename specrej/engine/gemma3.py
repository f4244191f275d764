"""The engine's own forward pass for Gemma 3 text decoders (`Gemma3ForCausalLM`), gpt-fast style.

Built on `llama.LlamaForward`'s pieces: the fused q/k/v and gate/up GEMMs, the prompt's KV run once
and shared by every row, each row's own KV in a static `cache.KVCache`.
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

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..errors import SpecrejError
from .budget import check_context
from .llama import LlamaFootprint, LlamaForward, rotate

SUPPORTED_MODEL_TYPES = ("gemma3_text",)  # the model types Gemma3Forward runs
LAYER_TYPES = ("sliding_attention", "full_attention")


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm as PyTorch's fused kernel: in float32, times `weight` (the module's 1 + weight,
    precomputed in float32), cast back to x's dtype (Gemma3RMSNorm: (x * w).to(dtype), not x.to(dtype) * w)."""
    return F.rms_norm(x.float(), weight.shape, weight, eps).to(x.dtype)


def _plus_one(norm) -> torch.Tensor:
    return 1.0 + norm.weight.detach().float()


class GemmaLayerWeights(NamedTuple):
    """One Gemma 3 layer's tensors as its layer functions take them (`llama.LayerWeights`'s role):
    the norms' 1 + weight in float32, the fused projections."""

    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    pre_feedforward_norm: torch.Tensor
    post_feedforward_norm: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    eps: float
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


def attention_inputs(x: torch.Tensor, w: GemmaLayerWeights, cos, sin, heads: int, kv_heads: int, head_dim: int,
                     linear=F.linear):
    """A Gemma 3 layer up to attention: the input norm, the fused q/k/v GEMM, each head's q and k
    normed and rotated. x [rows, seq, hidden] -> q [rows, heads, seq, d], k and v [rows, kv_heads, seq, d]."""
    rows, seq = x.shape[0], x.shape[1]
    h = gemma_rms_norm(x, w.input_norm, w.eps)
    qkv = linear(h, w.qkv, w.qkv_bias).view(rows, seq, -1, head_dim)
    q = rotate(gemma_rms_norm(qkv[:, :, :heads], w.q_norm, w.eps), cos, sin).transpose(1, 2)
    k = rotate(gemma_rms_norm(qkv[:, :, heads : heads + kv_heads], w.k_norm, w.eps), cos, sin).transpose(1, 2)
    v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
    return q, k, v


def attention_output_and_mlp(x: torch.Tensor, out: torch.Tensor, w: GemmaLayerWeights, act,
                             linear=F.linear) -> torch.Tensor:
    """A Gemma 3 layer's second half: o_proj, its post-attention norm and the residual; the
    pre-feedforward norm, the gated MLP, its post-feedforward norm and the residual."""
    rows, seq = x.shape[0], x.shape[1]
    out = linear(out.transpose(1, 2).reshape(rows, seq, -1), w.o, w.o_bias)
    x = x + gemma_rms_norm(out, w.post_attention_norm, w.eps)
    h = gemma_rms_norm(x, w.pre_feedforward_norm, w.eps)
    gate, up = linear(h, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
    return x + gemma_rms_norm(linear(act(gate) * up, w.down, w.down_bias), w.post_feedforward_norm, w.eps)


class Gemma3Footprint(LlamaFootprint):
    """A `Gemma3Forward`'s bytes beside its weights (`llama.LlamaFootprint`'s, with Gemma 3's
    float32 norm copies, two rotary embeddings and the sliding layers' prompt mask)."""

    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV,
        counted at 4 bytes an element (the float32 copies that the norms make of a 16-bit model's
        states included): the residual stream, a norm's float32 input and output and its cast, the
        o_proj / down_proj output and the new residual (8 x hidden); the fused qkv output, the
        normed q and k with their float32 copies, the rotated copies and the rotation's
        temporaries (8 x qkv); the gate/up output, activation and product (4 x intermediate); the
        attention scores, their scaled and soft-maxed copies and the re-laid-out prompt part
        (5 x heads x context); the cos and sin of both rotary embeddings (4 x head_dim)."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        return 4 * (8 * self.hidden + 8 * qkv + 4 * self.intermediate + 5 * self.heads * context_len
                    + 4 * self.head_dim)

    def prefill_bytes(self, prompt_len: int) -> int:
        """Upper bound on the prompt's activations in `forward_prompt`, its attention scores, and the
        sliding layers' mask (bool, and the float copy SDPA makes of it)."""
        return prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.heads * prompt_len**2 + 5 * prompt_len**2


class Gemma3Forward(LlamaForward):
    """The forward pass of a Hugging Face Gemma 3 text causal LM over a `KVCache`.

    Inherits LlamaForward's fused projections, cache and sizes (`kind` "llama": the engine's own
    forward pass, as the records and flops.py know it); the layer, the attention windows and the
    logits are Gemma 3's."""

    layer_steps = (attention_inputs, attention_output_and_mlp)
    footprint_class = Gemma3Footprint

    def __init__(self, model, pack_weights: bool = True):
        config = model.config
        if getattr(config, "use_bidirectional_attention", False):
            raise SpecrejError("Gemma 3 with bidirectional attention is an encoder, not a generator")
        unknown = sorted(set(config.layer_types) - set(LAYER_TYPES))
        if unknown:
            raise SpecrejError(f"Gemma 3 layer types {unknown} are not known to the engine's forward pass")
        self.eps = config.rms_norm_eps  # before LlamaForward.__init__, which builds the layer weights
        super().__init__(model, pack_weights)
        self.layer_types = list(config.layer_types[: len(self.layers)])
        self.is_sliding = [t == "sliding_attention" for t in self.layer_types]
        self.sliding_window = config.sliding_window if any(self.is_sliding) else None
        self.final_logit_softcapping = config.final_logit_softcapping
        # transformers' Gemma 3 attention takes no attn_logit_softcapping (the config field is
        # ignored there: q/k norms replaced it), so neither does this one
        self.final_norm_weight = _plus_one(model.model.norm)

    def _layer_weights(self, prepare) -> list[GemmaLayerWeights]:
        """Per layer: the norms' 1 + weight in float32, once (Gemma3RMSNorm adds it at every call),
        and the projections' weights as `prepare` makes them for the run's GEMM."""
        return [GemmaLayerWeights(
            *(_plus_one(norm) for norm in (layer.input_layernorm, layer.post_attention_layernorm,
                                          layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm,
                                          layer.self_attn.q_norm, layer.self_attn.k_norm)),
            self.eps, prepare(self.qkv_weight[i]), self.qkv_bias[i], prepare(layer.self_attn.o_proj.weight),
            layer.self_attn.o_proj.bias, prepare(self.gate_up_weight[i]), self.gate_up_bias[i],
            prepare(layer.mlp.down_proj.weight), layer.mlp.down_proj.bias)
            for i, layer in enumerate(self.layers)]

    # -- limits and sizes ----------------------------------------------------------------
    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        """The context length only: the sliding layers attend to their window at any length."""
        check_context(prompt_len, max_new_tokens, self.max_positions)

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
        linear, weight, bias = self.lm_head
        logits = linear(hidden, weight, bias)
        cap = self.final_logit_softcapping
        if cap is not None:
            logits.div_(cap).tanh_().mul_(cap)
        return logits.float()

    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, cos and sin [1, seq, 1, d] of its layer type's rotary embedding."""
        by_type = {layer_type: tuple(t[:, :, None] for t in self.model.model.rotary_emb(x, positions, layer_type))
                   for layer_type in set(self.layer_types)}
        return [by_type[layer_type] for layer_type in self.layer_types]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.final_norm_weight, self.eps)
