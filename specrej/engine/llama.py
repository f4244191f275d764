"""The engine's own forward pass for Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), gpt-fast style.

The weights, norms, rotary embedding and MLP activation are Hugging Face's modules; the forward
pass is ours: q/k/v and gate/up are one GEMM each, the prompt runs once at batch 1 and its KV
is shared by every row (`attend_decode`), and each row's own KV lives in a static
`cache.KVCache`. `LlamaForward` implements `decoding.ForwardPass`. Qwen3 is Qwen2 with a per-head
RMSNorm on q and k before the rotation (`qk_norm`); `gemma3.Gemma3Forward` builds Gemma 3 on
these pieces.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import SpecrejError
from .budget import kv_bytes_per_token
from .cache import KVCache, PromptKV

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # the model types LlamaForward runs


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, half-split convention (as Llama in transformers)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """A Llama-family RMSNorm module applied as PyTorch's fused kernel (one op instead of six)."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


def attend_decode(q, prompt_k, prompt_v, k, v, scale: float) -> torch.Tensor:
    """One query token per row against the shared prompt KV and the row's own generated KV.

    q [rows, heads, 1, d]; prompt_k/v [kv_heads, P, d]; k/v [rows, kv_heads, T, d].
    The prompt part is one GEMM per KV head over every row's queries (the keys are shared).
    """
    rows, heads, _, d = q.shape
    kv_heads, prompt_len = prompt_k.shape[0], prompt_k.shape[1]
    group = heads // kv_heads
    q = q.view(rows, kv_heads, group, d)
    q_by_head = q.transpose(0, 1).reshape(kv_heads, rows * group, d)
    prompt_scores = (q_by_head @ prompt_k.transpose(1, 2)).view(kv_heads, rows, group, prompt_len).transpose(0, 1)
    scores = torch.cat([prompt_scores, q @ k.transpose(-1, -2)], dim=-1)
    probs = (scores.float() * scale).softmax(-1).to(q.dtype)
    prompt_probs, own_probs = probs.split([prompt_len, k.shape[2]], dim=-1)
    prompt_probs = prompt_probs.transpose(0, 1).reshape(kv_heads, rows * group, prompt_len)
    out = (prompt_probs @ prompt_v).view(kv_heads, rows, group, d).transpose(0, 1) + own_probs @ v
    return out.reshape(rows, heads, 1, d)


class LlamaForward:
    """The forward pass of a Hugging Face Llama, Mistral, Qwen2 or Qwen3 causal LM over a `KVCache`."""

    kind = "llama"  # the engine's own forward pass (decoding.ForwardPass.kind)
    chunked_decode = True  # forward_step takes any chunk of rows (first_row)

    def __init__(self, model):
        config = model.config
        self.model, self.config = model, config
        self.layers = model.model.layers
        attn = self.layers[0].self_attn
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scale = attn.scaling
        # Qwen3: each head's q and k RMS-normed (self_attn.q_norm / k_norm) before the rotation
        self.qk_norm = hasattr(attn, "q_norm")
        self.hidden_size, self.vocab_size = config.hidden_size, config.vocab_size
        self.device, self.dtype = model.device, model.dtype
        self.max_positions = config.max_position_embeddings
        self.sliding_window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
        self.kv_bytes_per_token = kv_bytes_per_token(len(self.layers), self.num_kv_heads, self.head_dim, self.dtype)
        self.num_layer_states = len(self.layers) + 1  # the embedding output and each layer's
        self._fuse_projections()

    @torch.no_grad()
    def _fuse_projections(self) -> None:
        """One GEMM for q/k/v and one for gate/up per layer (as gpt-fast's wqkv).

        The Hugging Face modules are re-pointed at views of the fused tensors, so the weights
        are not duplicated and the HF model keeps computing the same thing.
        """
        self.qkv_weight, self.qkv_bias, self.gate_up_weight, self.gate_up_bias = [], [], [], []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.qkv_weight.append(_fuse(attn.q_proj, attn.k_proj, attn.v_proj, attr="weight"))
            self.qkv_bias.append(_fuse(attn.q_proj, attn.k_proj, attn.v_proj, attr="bias"))
            self.gate_up_weight.append(_fuse(mlp.gate_proj, mlp.up_proj, attr="weight"))
            self.gate_up_bias.append(_fuse(mlp.gate_proj, mlp.up_proj, attr="bias"))

    # -- limits and sizes ----------------------------------------------------------------
    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        total = prompt_len + max_new_tokens
        if total > self.max_positions:
            raise SpecrejError(
                f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the "
                f"model's context of {self.max_positions} tokens"
            )
        if self.sliding_window and total > self.sliding_window:
            raise SpecrejError(f"prompt + max_new_tokens ({total}) exceeds the sliding window {self.sliding_window}")

    def new_cache(self) -> KVCache:
        return KVCache(len(self.layers), self.num_kv_heads, self.head_dim, self.dtype, self.device)

    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV
        (prompt + generated), counted at 4 bytes an element: the residual stream, norm and
        attention output (4 x hidden), the fused qkv output and its rotated copies (3 x qkv), the
        gate/up output, activation and product (4 x intermediate), and the attention scores,
        their scaled and soft-maxed copies and the re-laid-out prompt part (5 x heads x context);
        with `qk_norm` (Qwen3) also the normed q and k and their concatenation (2 x qkv)."""
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        qk_norm = 2 * qkv if self.qk_norm else 0
        return 4 * (4 * self.config.hidden_size + 3 * qkv + qk_norm + 4 * self.config.intermediate_size
                    + 5 * self.num_heads * context_len)

    def prefill_bytes(self, prompt_len: int) -> int:
        """Upper bound on the prompt's activations in `forward_prompt` and its attention scores."""
        return prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.num_heads * prompt_len**2

    def extra_cache_bytes(self, prompt_len: int, rows: int) -> int:
        """0: a `KVCache` holds exactly what the budget counts (the prompt once, each row's generated tokens)."""
        return 0

    # -- attention windows (a sliding-window architecture overrides these) -----------------
    def prompt_masks(self, seq: int) -> list[torch.Tensor | None]:
        """Per layer, the attention mask of a prompt of `seq` tokens (True: attend), or None where
        the causal mask is all there is: here every layer."""
        return [None] * len(self.layers)

    def first_visible(self, layer: int, query_pos: int) -> int:
        """The oldest position that layer `layer`'s query at position `query_pos` attends to: 0, every
        earlier one (check_fits keeps Mistral's sliding window out of reach)."""
        return 0

    # -- forward -------------------------------------------------------------------------
    def forward_prompt(self, token_ids: torch.Tensor, layer_states: torch.Tensor | None = None
                       ) -> tuple[PromptKV, torch.Tensor]:
        """The prompt token_ids [1, P] from position 0: its per-layer k and v [kv_heads, P, d]
        (a `PromptKV`, for `KVCache.share_prompt`: every layer's whole prompt) and the final hidden
        state of its last token [1, hidden]. A layer with a mask (`prompt_masks`) attends through it.
        `layer_states` [num_layer_states, 1, hidden], if given, receives its last token's state at every layer."""
        ks, vs = [], []
        masks = self.prompt_masks(token_ids.shape[1])

        def attend(layer, q, k, v):
            # copies, not views: k is a view of the rotated q+k tensor and v of the fused qkv
            # output, and a view would keep that whole storage alive for the prompt's run
            ks.append(k[0].clone(memory_format=torch.contiguous_format))
            vs.append(v[0].clone(memory_format=torch.contiguous_format))
            if masks[layer] is not None:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=masks[layer], scale=self.scale, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)

        hidden = self._forward(token_ids, 0, attend, layer_states)
        return PromptKV(ks, vs), hidden

    def forward_step(self, cache: KVCache, tokens: torch.Tensor, pos: int, first_row: int = 0,
                     layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """One token per row, tokens [rows, 1], at generated position `pos` for the cache's rows
        first_row...: writes their k/v into `cache` and returns their hidden states [rows, hidden]
        (`layer_states` [num_layer_states, rows, hidden], if given, receives every layer's).
        A layer whose window starts later (`first_visible`) attends to the tail of the shared prompt
        KV and of the rows' own KV: every row is at the same position, so the window is a slice."""
        prompt_len = cache.prompt_len

        def attend(layer, q, k, v):
            k, v = cache.update(layer, pos, k[:, :, 0], v[:, :, 0], first_row)
            prompt_k, prompt_v = cache.prompt_k[layer], cache.prompt_v[layer]
            first = self.first_visible(layer, prompt_len + pos)
            if first > 0:  # an empty prompt part once the window lies within the generated tokens
                prompt_k, prompt_v = prompt_k[:, first:], prompt_v[:, first:]
                own = max(0, first - prompt_len)
                k, v = k[:, :, own:], v[:, :, own:]
            return attend_decode(q, prompt_k, prompt_v, k, v, self.scale)

        return self._forward(tokens, prompt_len + pos, attend, layer_states)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden).float()

    def _forward(self, token_ids: torch.Tensor, first_pos: int, attend: Callable,
                 layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """Run the transformer on token_ids [rows, seq] at positions first_pos...; `attend(layer,
        q, k, v)` supplies attention. Returns the final (normed) hidden state of the last position,
        [rows, hidden]: logits are made from it in row chunks (see `decoding.sample`).

        `layer_states` [len(layers) + 1, rows, hidden], if given, receives the last position's state
        as transformers' output_hidden_states gives it: the embedding output, each layer's output
        but the last, and the final normed state."""
        rows, seq = token_ids.shape
        heads, kv_heads = self.num_heads, self.num_kv_heads
        x = self.model.get_input_embeddings()(token_ids)
        positions = torch.arange(first_pos, first_pos + seq, device=self.device)[None]
        cos, sin = (t[:, :, None] for t in self.model.model.rotary_emb(x, positions))  # [1, seq, 1, d]
        for i, layer in enumerate(self.layers):
            if layer_states is not None:
                layer_states[i].copy_(x[:, -1])
            h = rms_norm(x, layer.input_layernorm)
            qkv = F.linear(h, self.qkv_weight[i], self.qkv_bias[i]).view(rows, seq, -1, self.head_dim)
            qk = qkv[:, :, : heads + kv_heads]
            if self.qk_norm:  # skipped for Llama / Mistral / Qwen2, whose ops stay exactly as they were
                qk = torch.cat([rms_norm(qk[:, :, :heads], layer.self_attn.q_norm),
                                rms_norm(qk[:, :, heads:], layer.self_attn.k_norm)], dim=2)
            q, k = rotate(qk, cos, sin).transpose(1, 2).split([heads, kv_heads], dim=1)
            v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
            out = attend(i, q, k, v)  # [rows, heads, seq, d]
            x = x + layer.self_attn.o_proj(out.transpose(1, 2).reshape(rows, seq, -1))
            h = rms_norm(x, layer.post_attention_layernorm)
            gate, up = F.linear(h, self.gate_up_weight[i], self.gate_up_bias[i]).chunk(2, dim=-1)
            x = x + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        hidden = rms_norm(x[:, -1], self.model.model.norm)
        if layer_states is not None:
            layer_states[-1].copy_(hidden)
        return hidden


def _fuse(*modules, attr: str):
    parts = [getattr(m, attr) for m in modules]
    if parts[0] is None:
        return None
    fused = torch.cat([p.detach() for p in parts])
    start = 0
    for module, part in zip(modules, parts):
        setattr(module, attr, torch.nn.Parameter(fused[start : start + part.shape[0]], requires_grad=False))
        start += part.shape[0]
    return fused
