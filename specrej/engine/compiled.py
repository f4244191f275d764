"""The decode step as one compiled graph over static shapes (`--compile on`), gpt-fast style.

`StaticDecodeStep` is a whole decode step of the engine's own forward pass (`llama.LlamaForward`,
`gemma3.Gemma3Forward`): the embedding, every layer, the final norm, one token per row. Its shapes
are static within a phase of a rollout:
- the rows' own KV is the cache's preallocated buffer, full length, written at the position
  `pos`, which is data (a 0-d tensor, gpt-fast's `input_pos`), with a mask over the slots not yet
  filled (`cache.KVCache` zeroes them, so a masked slot holds finite numbers) and, for a layer with
  a sliding window, over the positions before its window (`first_visible`, data too);
- rows come in power-of-two buckets (`row_chunks`): a batch of 11 live rows runs as a bucket of
  16, whose last 5 rows are rows of the cache's buffer that no live row uses; where the buffer
  holds fewer rows than the bucket, the rows go as a few power-of-two chunks. So SR's shrinking
  batch reuses one graph per bucket instead of compiling one per size.
- the prompt's length and the cache's length are dynamic dimensions (`torch._dynamo.mark_dynamic`):
  one graph serves every prompt and every re-layout of the cache.
The weights are the graph's inputs (not constants of a frozen graph), so inductor's on-disk caches
(`$SPECREJ_CACHE/inductor`) make a second process's compile of the same graph a cache hit. On a
CPU in bfloat16 the GEMMs still run on oneDNN's packed weights (`linear.pack`): `packed_linear_op`
calls them as an opaque op, which is what inductor's freezing would do, without freezing's
compile that no cache keeps.

Prefill and sampling stay eager (one call per prompt; the draw takes a `torch.Generator`). A step
that collects every layer's states (ST-BoN) runs eagerly. No CUDA graphs yet: the cache's buffers
are inputs that the graph writes, which CUDA graph trees do not capture (not measured: no GPU).

Outputs differ from eager, so a compiled run's record says so (`params.compiled`). In float32 the
difference is in the last bits (fused ops round differently) and the sampled tokens were the same
in the tests. In bfloat16 a fused graph keeps in float32 what the eager ops round to bfloat16 after
every op: a different sample of the same distribution (docs/results.md, "The decode step as one graph").
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from .linear import PACKED_MAX_ROWS, PackedWeight


@torch.library.custom_op("specrej::packed_linear", mutates_args=())
def packed_linear_op(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear on a weight packed by `linear.pack`, opaque to inductor (whose lowering
    does not take a packed weight as a graph input)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@packed_linear_op.register_fake
def _packed_linear_shape(x, packed, bias):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


def graph_linear(x: torch.Tensor, weight, bias: torch.Tensor | None) -> torch.Tensor:
    """The GEMM inside the graph: a packed weight (`linear.PackedWeight`) up to PACKED_MAX_ROWS rows
    (the shapes are static, so the choice is made once, when the graph is traced), else F.linear."""
    if isinstance(weight, PackedWeight):
        if x.numel() <= PACKED_MAX_ROWS * x.shape[-1]:
            return packed_linear_op(x, weight.packed, bias)
        weight = weight.weight
    return F.linear(x, weight, bias)


def attend_static(q, prompt_k, prompt_v, k, v, prompt_visible, own_visible, scale: float) -> torch.Tensor:
    """One query per row against the shared prompt KV and the rows' whole preallocated KV, masked.

    q [rows, heads, 1, d]; prompt_k/v [kv_heads, P, d]; k/v [rows, kv_heads, L, d];
    prompt_visible [P] and own_visible [L] (bool): the keys this query sees."""
    rows, heads, _, d = q.shape
    kv_heads = prompt_k.shape[0]
    q = q.view(rows, kv_heads, heads // kv_heads, d)
    prompt_scores = torch.einsum("rkgd,kpd->rkgp", q, prompt_k).masked_fill(~prompt_visible, float("-inf"))
    own_scores = torch.einsum("rkgd,rkld->rkgl", q, k).masked_fill(~own_visible, float("-inf"))
    probs = (torch.cat([prompt_scores, own_scores], dim=-1).float() * scale).softmax(-1).to(q.dtype)
    prompt_probs, own_probs = probs.split([prompt_k.shape[1], k.shape[2]], dim=-1)
    out = torch.einsum("rkgp,kpd->rkgd", prompt_probs, prompt_v) + torch.einsum("rkgl,rkld->rkgd", own_probs, v)
    return out.reshape(rows, heads, 1, d)


def as_parameters(module: torch.nn.Module, value):
    """`value` (a layer's weights: tensors, `PackedWeight`s, None, floats) with every tensor
    registered as a parameter of `module` (in `module.params`), so that its graph takes it as an input."""
    if isinstance(value, torch.Tensor):
        module.params.append(torch.nn.Parameter(value.detach(), requires_grad=False))
        return module.params[-1]
    if isinstance(value, tuple):
        return type(value)(*(as_parameters(module, v) for v in value))
    return value


class StaticDecodeStep(torch.nn.Module):
    """A whole decode step of `forward` (a `llama.LlamaForward` or a subclass) for one token per row,
    over static shapes (the module docstring)."""

    def __init__(self, forward):
        super().__init__()
        self.forward_pass = forward
        self.embed = forward.model.get_input_embeddings()
        self.act = forward.act
        self.params = torch.nn.ParameterList()
        self.layer_weights = [as_parameters(self, w) for w in forward.eager_run.weights]
        self.inputs, self.output = forward.layer_steps

    def forward(self, tokens, pos, rotary, first_visible, prompt_k, prompt_v, k, v) -> torch.Tensor:
        """tokens [rows] at generated position `pos` (0-d); rotary: per layer (cos, sin) at that
        position; first_visible [layers]: each layer's oldest visible position. Writes each layer's
        new k/v into k/v [rows, kv_heads, L, d] at `pos`; returns the final hidden states [rows, hidden]."""
        fw = self.forward_pass
        x = self.embed(tokens[:, None])
        prompt_len, length = prompt_k[0].shape[1], k[0].shape[2]
        prompt_positions = torch.arange(prompt_len, device=x.device)
        own_positions = torch.arange(length, device=x.device)
        filled = own_positions <= pos
        for i, weights in enumerate(self.layer_weights):
            cos, sin = rotary[i]
            q, new_k, new_v = self.inputs(x, weights, cos, sin, fw.num_heads, fw.num_kv_heads, fw.head_dim,
                                          graph_linear)
            k[i].index_copy_(2, pos.view(1), new_k)
            v[i].index_copy_(2, pos.view(1), new_v)
            out = attend_static(q, prompt_k[i], prompt_v[i], k[i], v[i], prompt_positions >= first_visible[i],
                                filled & (own_positions + prompt_len >= first_visible[i]), fw.scale)
            x = self.output(x, out, weights, self.act, graph_linear)
        return fw.final_norm(x[:, -1])


class StaticSampler(torch.nn.Module):
    """`decoding.sample_next` and `decoding.token_logprobs` for plain sampling (no top-k or top-p
    cut), with the lm_head, as one graph: the logits [rows, vocab] are made and read in a few fused
    passes instead of one eager op each. The uniform draw `u` [rows, 1] comes from outside (the
    generator's own `torch.rand`, the call the eager sampler makes), so the same draw picks the same
    token up to the rounding of the fused softmax and cumulative sum."""

    def __init__(self, forward):
        super().__init__()
        _, weight, bias = forward.lm_head
        self.params = torch.nn.ParameterList()
        self.weight, self.bias = as_parameters(self, weight), as_parameters(self, bias)
        self.softcap = getattr(forward, "final_logit_softcapping", None)

    def forward(self, hidden: torch.Tensor, u: torch.Tensor, temperature: float):
        logits = graph_linear(hidden, self.weight, self.bias)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        logits = logits.float()
        tempered = logits / temperature if temperature != 1 else logits
        cdf = tempered.softmax(-1).cumsum(-1)
        choice = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(cdf.shape[-1] - 1)
        logprobs = logits.gather(-1, choice).squeeze(-1) - logits.logsumexp(-1)
        return choice.squeeze(-1), logprobs


def row_chunks(first_row: int, rows: int, capacity: int) -> list[tuple[int, int, int]]:
    """(start, rows, bucket) for each call that feeds rows first_row..first_row+rows of a cache
    buffer with `capacity` rows: one call whose bucket is the next power of two where the buffer
    has the rows for it, else power-of-two chunks (the last one padded where it can be)."""
    chunks = []
    while rows:
        bucket = 1 << (rows - 1).bit_length()
        if first_row + bucket <= capacity:
            chunks.append((first_row, rows, bucket))
            break
        size = 1 << (rows.bit_length() - 1)
        chunks.append((first_row, size, size))
        first_row, rows = first_row + size, rows - size
    return chunks


def inductor_cache_dir() -> str:
    """Where inductor keeps its compiled graphs: $TORCHINDUCTOR_CACHE_DIR if set, else
    $SPECREJ_CACHE/inductor, so a study's jobs share one cache (compiled once per machine)."""
    from ..models.cache import cache_dir

    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(cache_dir() / "inductor")


class CompiledDecode:
    """`forward`'s decode step through `StaticDecodeStep`, compiled: one graph per row bucket."""

    def __init__(self, forward):
        import torch._dynamo

        self.forward_pass = forward
        # one graph per row bucket (static), each prompt and cache length on it (dynamic)
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache_dir()
        # built at first use: a subclass (Gemma 3) finishes setting up after LlamaForward.__init__ made this
        self.graph = self.sampler = None
        self.buckets: set[int] = set()  # the row buckets run so far (one graph each)
        self.no_window = torch.zeros(len(forward.layers), dtype=torch.long, device=forward.device)

    def sample(self, hidden: torch.Tensor, temperature: float, generator: torch.Generator):
        """Plain sampling at `temperature` (> 0) from hidden states [rows, hidden]: (tokens, log-probs),
        each [rows]. The rows are a dynamic dimension: one graph for every number of rows."""
        import torch._dynamo

        if self.sampler is None:
            self.sampler = torch.compile(StaticSampler(self.forward_pass), fullgraph=True, dynamic=None)
        u = torch.rand(hidden.shape[0], 1, generator=generator, device=hidden.device)
        # a rollout's first states are the prompt's, expanded (stride 0, made outside inference
        # mode): a contiguous copy keeps the sampler on one graph
        hidden = hidden if hidden.is_contiguous() else hidden.contiguous()
        torch._dynamo.mark_dynamic(hidden, 0)
        torch._dynamo.mark_dynamic(u, 0)
        return self.sampler(hidden, u, temperature)

    def __call__(self, cache, tokens: torch.Tensor, pos: int, first_row: int) -> torch.Tensor:
        """tokens [rows, 1] of the cache's rows first_row... at generated position `pos` -> their
        hidden states [rows, hidden]; their k/v written into the cache."""
        import torch._dynamo

        fw = self.forward_pass
        if self.graph is None:
            self.graph = torch.compile(StaticDecodeStep(fw), fullgraph=True, dynamic=None)
        prompt_len = cache.prompt_len
        position = torch.tensor(pos, device=fw.device)
        rotary = fw.rotary(tokens.new_empty(0, dtype=fw.dtype), torch.tensor([[prompt_len + pos]], device=fw.device))
        if fw.sliding_window is None:  # every layer sees every position
            first_visible = self.no_window
        else:
            first_visible = torch.tensor([fw.first_visible(layer, prompt_len + pos) for layer in range(len(fw.layers))],
                                         device=fw.device)
        for t in cache.prompt_k + cache.prompt_v:
            torch._dynamo.mark_dynamic(t, 1)
        hidden = []
        for start, rows, bucket in row_chunks(first_row, tokens.shape[0], cache.k[0].shape[0]):
            chunk = tokens[start - first_row : start - first_row + rows, 0]
            if bucket > rows:
                chunk = torch.cat([chunk, chunk.new_zeros(bucket - rows)])
            ks = [buffer[start : start + bucket] for buffer in cache.k]
            vs = [buffer[start : start + bucket] for buffer in cache.v]
            for t in ks + vs:
                torch._dynamo.mark_dynamic(t, 2)
            self.buckets.add(bucket)
            hidden.append(self.graph(chunk, position, rotary, first_visible, cache.prompt_k, cache.prompt_v,
                                     ks, vs)[:rows])
        cache.length = pos + 1
        return hidden[0] if len(hidden) == 1 else torch.cat(hidden)


COMPILE_SETTINGS = ("auto", "on", "off")


def resolve_compile(setting: str, fast_path: bool, device: torch.device) -> bool:
    """Whether the decode step runs compiled: --compile `setting` for a model on `device`, whose
    forward pass is the engine's own (`fast_path`) or the fallback (never compiled).

    auto: eager on every device. On this project's CPU a study job's decode is too short to pay
    the compile (docs/results.md, "The decode step as one graph"); on CUDA no measurement backs it
    (`make gpu-check` measures it where a GPU is lent), and auto does not assume what was not measured."""
    from ..errors import SpecrejError, shown

    if setting not in COMPILE_SETTINGS:
        raise SpecrejError(f"--compile must be one of {', '.join(COMPILE_SETTINGS)}, got {shown(setting)}")
    if setting == "on" and not fast_path:
        raise SpecrejError("--compile on: only the engine's own forward passes compile (Llama, Mistral, Qwen2, "
                           "Qwen3, Gemma 3); this model runs through the fallback (use --compile off or auto)")
    return setting == "on"
