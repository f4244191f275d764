"""The engine's own forward pass for Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), gpt-fast style.

The weights, norms, rotary embedding and MLP activation are Hugging Face's modules; the forward
pass is ours: q/k/v and gate/up are one GEMM each, the prompt runs once at batch 1 and its KV
is shared by every row, and each row's own KV lives in a static `cache.KVCache`. One decode step
(`decode_step`) serves the eager step and the compiled one (`compiled.StaticDecodeStep` traces it),
each with its attention (`attention.attention_for`). `LlamaForward` implements
`decoding.ForwardPass`. Qwen3 is Qwen2 with a per-head RMSNorm on q and k before the rotation
(`qk_norm`); `gemma3.Gemma3Forward` builds Gemma 3 on these pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..errors import SpecrejError
from .budget import check_context, kv_bytes_per_token
from .attention import attend_exact
from .cache import KVCache, PromptKV
from .linear import linear_for

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # the model types LlamaForward runs


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, half-split convention (as Llama in transformers)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """A Llama-family RMSNorm module applied as PyTorch's fused kernel (one op instead of six)."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


class LayerWeights(NamedTuple):
    """One decoder layer's tensors as the layer functions take them: passed in, not read from the
    module, so that one function serves every layer (eager, and as the inputs of the compiled graph)."""

    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    eps: float
    qkv: torch.Tensor  # q/k/v fused (`LlamaForward._fuse_projections`)
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor  # gate/up fused
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    q_norm: torch.Tensor | None  # Qwen3's per-head RMSNorm weights on q and k; None elsewhere
    k_norm: torch.Tensor | None


def attention_inputs(x: torch.Tensor, w: LayerWeights, cos, sin, heads: int, kv_heads: int, head_dim: int,
                     linear=F.linear):
    """A layer's first half up to attention: the input norm, the fused q/k/v GEMM, Qwen3's q/k
    norms, the rotation. x [rows, seq, hidden] -> q [rows, heads, seq, d], k and v [rows, kv_heads, seq, d]."""
    rows, seq = x.shape[0], x.shape[1]
    h = F.rms_norm(x, w.input_norm.shape, w.input_norm, w.eps)
    qkv = linear(h, w.qkv, w.qkv_bias).view(rows, seq, -1, head_dim)
    qk = qkv[:, :, : heads + kv_heads]
    if w.q_norm is not None:  # skipped for Llama / Mistral / Qwen2, whose ops stay exactly as they were
        qk = torch.cat([F.rms_norm(qk[:, :, :heads], w.q_norm.shape, w.q_norm, w.eps),
                        F.rms_norm(qk[:, :, heads:], w.k_norm.shape, w.k_norm, w.eps)], dim=2)
    q, k = rotate(qk, cos, sin).transpose(1, 2).split([heads, kv_heads], dim=1)
    v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
    return q, k, v


def attention_output_and_mlp(x: torch.Tensor, out: torch.Tensor, w: LayerWeights, act,
                             linear=F.linear) -> torch.Tensor:
    """A layer's second half: o_proj of the attention output `out` [rows, heads, seq, d] and the
    residual, the post-attention norm, the gated MLP (one GEMM for gate/up) and its residual."""
    rows, seq = x.shape[0], x.shape[1]
    x = x + linear(out.transpose(1, 2).reshape(rows, seq, -1), w.o, w.o_bias)
    h = F.rms_norm(x, w.post_attention_norm.shape, w.post_attention_norm, w.eps)
    gate, up = linear(h, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
    return x + linear(act(gate) * up, w.down, w.down_bias)


class LayerRun(NamedTuple):
    """How `LlamaForward.run_layers` runs the layers: a layer's two halves around attention, each
    layer's weights as they take them, the GEMM they call and the token embedding (the compiled step
    takes the same halves with the weights as its graph's inputs and the graph's GEMM:
    `compiled.StaticDecodeStep`)."""

    inputs: Callable  # attention_inputs or a class's own
    output: Callable  # attention_output_and_mlp or a class's own
    weights: list  # per layer: LayerWeights or a class's own
    linear: Callable  # F.linear, or linear.packed_linear with packed weights
    embed: torch.nn.Module  # the model's input embedding


class LlamaFootprint:
    """The bytes a `LlamaForward` allocates beside its weights, as the memory budget counts them
    (`budget.Footprint`): its KV per token, and bounds on the activations of a step and of a prompt."""

    def __init__(self, forward: LlamaForward):
        self.heads, self.kv_heads, self.head_dim = forward.num_heads, forward.num_kv_heads, forward.head_dim
        self.hidden, self.intermediate = forward.config.hidden_size, forward.config.intermediate_size
        self.qk_norm = forward.qk_norm
        self.kv_bytes_per_token = kv_bytes_per_token(len(forward.layers), self.kv_heads, self.head_dim, forward.dtype)

    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV
        (prompt + generated), counted at 4 bytes an element: the residual stream, norm and
        attention output (4 x hidden), the fused qkv output and its rotated copies (3 x qkv), the
        gate/up output, activation and product (4 x intermediate), and the attention scores,
        their scaled and soft-maxed copies and the re-laid-out prompt part (5 x heads x context);
        with `qk_norm` (Qwen3) also the normed q and k and their concatenation (2 x qkv)."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        qk_norm = 2 * qkv if self.qk_norm else 0
        return 4 * (4 * self.hidden + 3 * qkv + qk_norm + 4 * self.intermediate + 5 * self.heads * context_len)

    def prefill_bytes(self, prompt_len: int) -> int:
        """Upper bound on the prompt's activations in `forward_prompt` and its attention scores."""
        return prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.heads * prompt_len**2

    def extra_cache_bytes(self, prompt_len: int, rows: int) -> int:
        """0: a `KVCache` holds exactly what the budget counts (the prompt once, each row's generated tokens)."""
        return 0


class LlamaForward:
    """The forward pass of a Hugging Face Llama, Mistral, Qwen2 or Qwen3 causal LM over a `KVCache`."""

    kind = "llama"  # the engine's own forward pass (decoding.ForwardPass.kind)
    footprint_class = LlamaFootprint  # the bytes it takes beside its weights (a subclass names its own)
    chunked_decode = True  # forward_step takes any chunk of rows (first_row)
    layer_steps = (attention_inputs, attention_output_and_mlp)  # a layer's two halves around attention

    def __init__(self, model, pack_weights: bool = True):
        """`pack_weights`: the GEMMs run on packed weights where that is faster (`linear.linear_for`).
        Compiling the decode step is the engine's choice: `compiled.CompiledForward` wraps this."""
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
        self.footprint = self.footprint_class(self)
        self.num_layer_states = len(self.layers) + 1  # the embedding output and each layer's
        self._fuse_projections()
        self.act = self.layers[0].mlp.act_fn  # one module for every layer
        linear, prepare = linear_for(self.device, self.dtype, pack_weights)
        self.packed = linear is not F.linear
        # prefill and decode (the compiled step takes the same weights); the lm_head's weight prepared alike
        self.eager_run = LayerRun(*self.layer_steps, self._layer_weights(prepare), linear, model.get_input_embeddings())
        self.lm_head = (linear, prepare(model.lm_head.weight), model.lm_head.bias)

    def _layer_weights(self, prepare: Callable) -> list[LayerWeights]:
        """Per layer, its tensors; the GEMMs' weights as `prepare` makes them for the run's `linear`."""
        weights = []
        for i, layer in enumerate(self.layers):
            attn, mlp = layer.self_attn, layer.mlp
            weights.append(LayerWeights(
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight, layer.input_layernorm.variance_epsilon,
                prepare(self.qkv_weight[i]), self.qkv_bias[i], prepare(attn.o_proj.weight), attn.o_proj.bias,
                prepare(self.gate_up_weight[i]), self.gate_up_bias[i], prepare(mlp.down_proj.weight), mlp.down_proj.bias,
                attn.q_norm.weight if self.qk_norm else None, attn.k_norm.weight if self.qk_norm else None))
        return weights

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
        check_context(prompt_len, max_new_tokens, self.max_positions)
        total = prompt_len + max_new_tokens
        if self.sliding_window and total > self.sliding_window:
            raise SpecrejError(f"prompt + max_new_tokens ({total}) exceeds the sliding window {self.sliding_window}")

    def new_cache(self, spare_slots: int = 0) -> KVCache:
        """An empty `KVCache` for this model; `spare_slots` more per row than a layout asks for (the
        compiled step's: `cache.KVCache`)."""
        return KVCache(len(self.layers), self.num_kv_heads, self.head_dim, self.dtype, self.device,
                       spare_slots=spare_slots)

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

        x = self.eager_run.embed(token_ids)
        rotary = self.rotary(x, torch.arange(token_ids.shape[1], device=self.device)[None])
        return PromptKV(ks, vs), self.run_layers(x, rotary, attend, self.eager_run, layer_states)

    def forward_step(self, cache: KVCache, tokens: torch.Tensor, pos: int, first_row: int = 0,
                     layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """One token per row, tokens [rows, 1], at generated position `pos` for the cache's rows
        first_row...: `decode_step`, eager, writing their k/v into `cache`; returns their hidden
        states [rows, hidden] (`layer_states` [num_layer_states, rows, hidden], if given, receives
        every layer's). Every row is at the same position, so a layer's window (`first_visible`) is
        a slice of the prompt's KV and of the rows' own (`attention.attend_exact`)."""
        prompt_len, rows = cache.prompt_len, slice(first_row, first_row + tokens.shape[0])
        rotary = self.rotary(tokens.new_empty(0, dtype=self.dtype), torch.tensor([[prompt_len + pos]], device=self.device))
        first_visible = [self.first_visible(layer, prompt_len + pos) for layer in range(len(self.layers))]
        hidden = self.decode_step(self.eager_run, attend_exact, tokens[:, 0], pos, rotary, first_visible, pos + 1,
                                  cache.prompt_k, cache.prompt_v, [k[rows] for k in cache.k], [v[rows] for v in cache.v],
                                  layer_states)
        cache.length = pos + 1
        return hidden

    def decode_step(self, run: LayerRun, attention: Callable, tokens: torch.Tensor, pos, rotary: list, first_visible,
                    span, prompt_k: list, prompt_v: list, k: list, v: list,
                    layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """The decode step, eager and compiled alike (`compiled.StaticDecodeStep` traces it): tokens
        [rows] at generated position `pos` (an int; a 0-d tensor in the graph) with `run`'s layers,
        `rotary` (per layer, cos and sin there) and `first_visible` (per layer, the oldest position
        seen). Each layer's new k/v is written at `pos` into its buffers k/v [rows, kv_heads, L, d],
        and `attention` (`attention.attention_for`) reads their first `span` slots (None: the whole
        buffers, which the C++ kernel reads up to `pos`) and the prompt's KV. Returns the final
        hidden states [rows, hidden]; `layer_states`, if given, receives every layer's."""
        position_is_data = isinstance(pos, torch.Tensor)  # in the graph: one graph for every position

        def attend(layer, q, new_k, new_v):
            for buffer, new in ((k[layer], new_k), (v[layer], new_v)):
                if position_is_data:
                    buffer.index_copy_(2, pos.view(1), new)
                else:
                    buffer[:, :, pos] = new[:, :, 0]
            own_k, own_v = (k[layer], v[layer]) if span is None else (k[layer][:, :, :span], v[layer][:, :, :span])
            return attention(q, prompt_k[layer], prompt_v[layer], own_k, own_v, pos, first_visible[layer], self.scale)

        return self.run_layers(run.embed(tokens[:, None]), rotary, attend, run, layer_states)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        linear, weight, bias = self.lm_head
        return linear(hidden, weight, bias).float()

    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the rotary embedding's cos and sin [1, seq, 1, d] at `positions`: one for every layer."""
        cos, sin = (t[:, :, None] for t in self.model.model.rotary_emb(x, positions))
        return [(cos, sin)] * len(self.layers)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.model.model.norm)

    def run_layers(self, x: torch.Tensor, rotary: list, attend: Callable, run: LayerRun,
                   layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """The layer loop and the final norm, prompt and step, eager and compiled alike: x [rows, seq,
        hidden] (the embedding's output) through every layer, `run`'s two halves around
        `attend(layer, q, k, v)` with the layer's (cos, sin) of `rotary`. Returns the final (normed)
        hidden state of the last position, [rows, hidden]. `layer_states` [len(layers) + 1, rows,
        hidden], if given, receives the last position's states as transformers' output_hidden_states
        gives them: the embedding output (Gemma 3: scaled), each layer's output but the last, and
        the final normed state."""
        for i, weights in enumerate(run.weights):
            if layer_states is not None:
                layer_states[i].copy_(x[:, -1])
            cos, sin = rotary[i]
            q, k, v = run.inputs(x, weights, cos, sin, self.num_heads, self.num_kv_heads, self.head_dim, run.linear)
            x = run.output(x, attend(i, q, k, v), weights, self.act, run.linear)  # attention [rows, heads, seq, d]
        hidden = self.final_norm(x[:, -1])
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
