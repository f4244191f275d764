"""Batched sampling from one prompt with a static KV cache, in the style of gpt-fast.

The model is Hugging Face's (its weights, norms, rotary embedding and MLP activation), but the
forward pass and the KV cache are ours: the prompt is prefilled once and its KV shared by every
row, rows decode in lock-step with explicit tensors, and finished or halted rows are pruned out
of the cache and all per-row state in place (no re-prefill, no re-tokenisation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .budget import kv_bytes_per_token
from .cache import KVCache, compaction_order, moved_rows
from .errors import SpecrejError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    max_new_tokens: int = 256

    def __post_init__(self):
        if self.temperature < 0:
            raise SpecrejError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SpecrejError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SpecrejError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise SpecrejError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


def sample_next(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Draw one token per row from fp32 logits [rows, vocab] (temperature, top-k, then top-p)."""
    if params.temperature == 0:
        return logits.argmax(-1)
    if params.temperature != 1:
        logits = logits / params.temperature
    candidates = None  # vocabulary ids of the columns of `logits`, once cut or sorted
    if params.top_k:
        logits, candidates = logits.topk(min(params.top_k, logits.shape[-1]), dim=-1)
    if params.top_p < 1:
        if candidates is None:
            logits, candidates = logits.sort(dim=-1, descending=True)
        probs = logits.softmax(-1)
        # drop a token once the tokens before it already reach top_p (the first always stays)
        logits = logits.masked_fill(probs.cumsum(-1) - probs >= params.top_p, float("-inf"))
    # inverse-CDF sampling: one uniform per row (cheaper than one exponential per vocab entry)
    cdf = logits.softmax(-1).cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    choice = torch.searchsorted(cdf, u, right=True).clamp_max(cdf.shape[-1] - 1)
    return (choice if candidates is None else candidates.gather(-1, choice)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of `tokens` under the model's own (untempered) distribution."""
    return logits.gather(-1, tokens[:, None]).squeeze(-1) - logits.logsumexp(-1)


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


@dataclass
class PrefilledPrompt:
    token_ids: list[int]
    k: list[torch.Tensor]  # per layer [kv_heads, P, d]
    v: list[torch.Tensor]
    hidden: torch.Tensor  # [hidden] final hidden state of the last prompt token (lm_head input)


class Engine:
    """A decoder-only LM of the Llama family with our own prefill/decode over a static cache."""

    def __init__(self, model, tokenizer, stop_token_ids: Iterable[int] = ()):
        config = model.config
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise SpecrejError(
                f"the engine supports {', '.join(SUPPORTED_MODEL_TYPES)} architectures; "
                f"this model is {config.model_type!r}"
            )
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.layers = model.model.layers
        attn = self.layers[0].self_attn
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scale = attn.scaling
        self.device, self.dtype = model.device, model.dtype
        self.max_positions = config.max_position_embeddings
        self.sliding_window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
        self.kv_bytes_per_token = kv_bytes_per_token(len(self.layers), self.num_kv_heads, self.head_dim, self.dtype)
        self.stop_token_ids = torch.tensor(sorted(set(stop_token_ids) | _eos_ids(model, tokenizer)), device=self.device)
        # Rows are sampled and decoded in chunks, so that the logits and activations of a step are
        # bounded (see memory_margin). A GPU wants large chunks (each chunk reads the weights
        # again); a CPU is compute-bound from a few dozen rows on.
        cuda = self.device.type == "cuda"
        self.sample_chunk_rows = max(1, (2**24 if cuda else 2**22) // config.vocab_size)  # 64 / 16 MiB of fp32 logits
        self.decode_chunk_bytes = 2**30 if cuda else 2**26  # activations of one decode chunk (decode_row_bytes)
        self._fuse_projections()

    # -- set-up --------------------------------------------------------------------------
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
        self.qkv_sizes = [self.num_heads * self.head_dim] + [self.num_kv_heads * self.head_dim] * 2

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of the prompt rendered with the tokenizer's chat template (plain text if none)."""
        if self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def decode(self, token_ids: list[list[int]]) -> list[str]:
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)

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

    # -- memory --------------------------------------------------------------------------
    def decode_row_bytes(self, context_len: int) -> int:
        """Upper bound on one row's activations in a decode step with `context_len` tokens of KV
        (prompt + generated), counted at 4 bytes an element: the residual stream, norm and
        attention output (4 x hidden), the fused qkv output and its rotated copies (3 x qkv), the
        gate/up output, activation and product (4 x intermediate), and the attention scores,
        their scaled and soft-maxed copies and the re-laid-out prompt part (5 x heads x context)."""
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        return 4 * (4 * self.config.hidden_size + 3 * qkv + 4 * self.config.intermediate_size
                    + 5 * self.num_heads * context_len)

    def decode_chunk_rows(self, context_len: int) -> int:
        """Rows fed through the model at once in a decode step: as many as keep the activations
        within `decode_chunk_bytes` (at least one), so they do not grow with b_init."""
        return max(1, self.decode_chunk_bytes // self.decode_row_bytes(context_len))

    def memory_margin(self, prompt_len: int, rows: int, params: SamplingParams) -> int:
        """Bytes beside the KV budget that a prompt's run with at most `rows` rows may allocate
        (the bound that tests/test_memory.py checks the measured peak against):

        - decode: one chunk of rows' activations, at most max(decode_chunk_bytes, one row's);
        - sampling: `sampler_copies(params)` fp32 [rows, vocab] tensors for one chunk of at most
          `sample_chunk_rows` rows (logits, their tempered/sorted/soft-maxed/cumulated copies,
          the int64 sort indices);
        - prefill: the prompt's activations (prompt_len rows) and its attention scores;
        - per row: the token-id and log-prob buffers [max_new_tokens] and one gathered copy of
          them (when responses are read out), three [hidden] states and a few ids and masks.

        Not included: the reward model's pass (a reward model scores --reward-batch-size responses
        at a time, so its activations are bounded by that batch, not by the number of rows) and
        Python objects (token lists, texts).
        """
        context = prompt_len + params.max_new_tokens
        row = self.decode_row_bytes(context)
        decode = min(rows * row, max(self.decode_chunk_bytes, row))
        sampling = sampler_copies(params) * min(rows, self.sample_chunk_rows) * self.config.vocab_size * 4
        prefill = prompt_len * self.decode_row_bytes(prompt_len) + 4 * self.num_heads * prompt_len**2
        per_row = 2 * 12 * params.max_new_tokens + 3 * 4 * self.config.hidden_size + 128
        return decode + sampling + prefill + rows * per_row

    # -- forward -------------------------------------------------------------------------
    def _forward(self, token_ids: torch.Tensor, first_pos: int, attend: Callable) -> torch.Tensor:
        """Run the transformer on token_ids [rows, seq] at positions first_pos...; `attend(layer,
        q, k, v)` supplies attention. Returns the final (normed) hidden state of the last position,
        [rows, hidden]: logits are made from it in row chunks (see `sample`)."""
        rows, seq = token_ids.shape
        heads, kv_heads = self.num_heads, self.num_kv_heads
        x = self.model.get_input_embeddings()(token_ids)
        positions = torch.arange(first_pos, first_pos + seq, device=self.device)[None]
        cos, sin = (t[:, :, None] for t in self.model.model.rotary_emb(x, positions))  # [1, seq, 1, d]
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_layernorm)
            qkv = F.linear(h, self.qkv_weight[i], self.qkv_bias[i]).view(rows, seq, -1, self.head_dim)
            q, k = rotate(qkv[:, :, : heads + kv_heads], cos, sin).transpose(1, 2).split([heads, kv_heads], dim=1)
            v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
            out = attend(i, q, k, v)  # [rows, heads, seq, d]
            x = x + layer.self_attn.o_proj(out.transpose(1, 2).reshape(rows, seq, -1))
            h = rms_norm(x, layer.post_attention_layernorm)
            gate, up = F.linear(h, self.gate_up_weight[i], self.gate_up_bias[i]).chunk(2, dim=-1)
            x = x + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        return rms_norm(x[:, -1], self.model.model.norm)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden).float()

    @torch.inference_mode()
    def sample(self, hidden: torch.Tensor, params: SamplingParams, generator: torch.Generator):
        """Next token and its log-prob for each row, from hidden states [rows, hidden].

        Logits are made a chunk of rows at a time: SR's initial batch can run to thousands of
        rows, and [rows, vocab] fp32 logits plus the sampler's temporaries would not fit.
        """
        tokens, logprobs = [], []
        for chunk in hidden.split(self.sample_chunk_rows):
            logits = self.logits(chunk)
            chosen = sample_next(logits, params, generator)
            tokens.append(chosen)
            logprobs.append(token_logprobs(logits, chosen))
        return torch.cat(tokens), torch.cat(logprobs)

    @torch.inference_mode()
    def prefill(self, prompt_ids: list[int]) -> PrefilledPrompt:
        """Run the prompt once (batch 1); its KV is then shared by every row that samples from it."""
        ks, vs = [], []

        def attend(layer, q, k, v):
            # copies, not views: k is a view of the rotated q+k tensor and v of the fused qkv
            # output, and a view would keep that whole storage alive for the prompt's run
            ks.append(k[0].clone(memory_format=torch.contiguous_format))
            vs.append(v[0].clone(memory_format=torch.contiguous_format))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)

        hidden = self._forward(torch.tensor([prompt_ids], device=self.device), 0, attend)
        return PrefilledPrompt(list(prompt_ids), ks, vs, hidden[0])

    @torch.inference_mode()
    def decode_one_token(self, cache: KVCache, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Feed each live row's token at generated position `pos`; returns the hidden states that
        predict the next token, [rows, hidden]. Rows go through the model in chunks of
        `decode_chunk_rows`, so a step's activations stay bounded however many rows there are."""
        prompt_len = cache.prompt_k[0].shape[1]
        chunk = self.decode_chunk_rows(prompt_len + pos + 1)
        hidden = []
        for start in range(0, tokens.shape[0], chunk):
            def attend(layer, q, k, v, start=start):
                k, v = cache.update(layer, pos, k[:, :, 0], v[:, :, 0], start)
                return attend_decode(q, cache.prompt_k[layer], cache.prompt_v[layer], k, v, self.scale)

            hidden.append(self._forward(tokens[start : start + chunk, None], prompt_len + pos, attend))
        return hidden[0] if len(hidden) == 1 else torch.cat(hidden)


def sampler_copies(params: SamplingParams) -> int:
    """fp32 [rows, vocab] tensors alive at once while `sample` draws one chunk, at most.

    Top-p: the logits, the tempered copy, the sorted values and their int64 indices (2), the
    softmax, its cumsum, the masked copy, the final softmax and cumsum, of which at most about
    7.5 at once (7 measured with budget.StorageTracker). Otherwise the logits, the tempered copy,
    the softmax and its cumsum: 4. Half a copy more for the lm_head output of a 16-bit model.
    """
    return 8 if params.top_p < 1 else 5


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


def _eos_ids(model, tokenizer) -> set[int]:
    ids = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        eos = getattr(source, "eos_token_id", None)
        ids |= set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    return ids


@dataclass
class RowOutput:
    candidate_id: int
    token_ids: list[int]  # generated tokens, stop token excluded
    token_logprobs: list[float]
    stopped: bool  # ended with a stop token (else: still running, halted, or at max_new_tokens)


class Rollout:
    """Rows sampling continuations of one prefilled prompt in lock-step.

    Per-row state (candidate id, tokens, log-probs, next-token hidden state) lives in tensors whose
    first dimension is the row, and is pruned together with the KV cache.
    """

    def __init__(self, engine: Engine, prompt: PrefilledPrompt, rows: int, max_len: int,
                 params: SamplingParams, generator: torch.Generator, first_candidate_id: int = 0):
        self.engine, self.params, self.generator = engine, params, generator
        self.cache = engine.new_cache()
        self.cache.share_prompt(prompt.k, prompt.v)
        self.cache.allocate(rows, max_len)
        device = engine.device
        self.candidate_ids = torch.arange(first_candidate_id, first_candidate_id + rows, device=device)
        self.tokens = torch.zeros(rows, params.max_new_tokens, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(rows, params.max_new_tokens, dtype=torch.float32, device=device)
        self.hidden = prompt.hidden.expand(rows, -1)
        self.length = 0  # tokens sampled per live row
        self.tokens_generated = 0

    @property
    def num_rows(self) -> int:
        return self.candidate_ids.numel()

    @property
    def needs_room(self) -> bool:
        """The next step would write past the cache's preallocated length."""
        return self.length + 1 > self.cache.max_len

    def step(self) -> list[RowOutput]:
        """Sample one token for every row; return the rows that finished (stop token or length)."""
        tokens, logprobs = self.engine.sample(self.hidden, self.params, self.generator)
        self.tokens[:, self.length] = tokens
        self.logprobs[:, self.length] = logprobs
        self.length += 1
        self.tokens_generated += self.num_rows
        stopped = torch.isin(tokens, self.engine.stop_token_ids)
        done = stopped | (self.length == self.params.max_new_tokens)
        finished = self._remove(done, stopped) if done.any() else []
        if self.num_rows:
            self.hidden = self.engine.decode_one_token(self.cache, self.tokens[:, self.length - 1], self.length - 1)
        return finished

    def partial_outputs(self) -> list[RowOutput]:
        """The live rows' responses so far."""
        return self._outputs(torch.arange(self.num_rows, device=self.engine.device), None)

    def halt(self, candidate_ids: Iterable[int]) -> list[RowOutput]:
        halted = torch.isin(self.candidate_ids, torch.tensor(list(candidate_ids), device=self.engine.device))
        return self._remove(halted, None)

    def grow(self, max_len: int) -> None:
        self.cache.relayout(max_len)

    def release(self) -> None:
        """Free the KV cache and the per-row buffers once no row is live (counters stay)."""
        self.cache.free()
        self.candidate_ids = self.candidate_ids.new_empty(0)
        self.tokens = self.logprobs = self.hidden = None

    def _outputs(self, rows: torch.Tensor, stopped: torch.Tensor | None) -> list[RowOutput]:
        ids = self.candidate_ids[rows].tolist()
        tokens = self.tokens[rows, : self.length].tolist()
        logprobs = self.logprobs[rows, : self.length].tolist()
        ended = stopped[rows].tolist() if stopped is not None else [False] * len(ids)
        return [
            RowOutput(c, t[:-1] if s else t, lp[:-1] if s else lp, s)
            for c, t, lp, s in zip(ids, tokens, logprobs, ended)
        ]

    def _remove(self, remove: torch.Tensor, stopped: torch.Tensor | None) -> list[RowOutput]:
        removed = self._outputs(remove.nonzero().flatten(), stopped)
        order = compaction_order(~remove)
        self.candidate_ids = self.candidate_ids[order]
        self.hidden = self.hidden[order]
        # the token and log-prob buffers are compacted in place (only the rows that move are
        # copied), like the cache: a gathered copy would double them for the moment
        self.tokens, self.logprobs = _compact(self.tokens, order), _compact(self.logprobs, order)
        self.cache.prune(order)
        return removed


def _compact(buffer: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """buffer's rows `order` as its first rows, in place; returns the view of those rows."""
    src, dst = moved_rows(order)
    if src.numel():
        buffer[dst] = buffer[src]
    return buffer[: order.numel()]
