"""The decode step's attention, one signature for every implementation (`attention_for` picks one):
one query per row against the prompt's KV, shared by every row, and the rows' own KV, read from the
first slots of their preallocated buffers (`llama.LlamaForward.decode_step`):

    attend(q, prompt_k, prompt_v, k, v, pos, first_visible, scale) -> [rows, heads, 1, d]

- `attend_exact`, the eager step's on any device: reads exactly the visible keys (the window a
  slice), the prompt's part one GEMM per KV head over every row's queries.
- `attend_static`, inductor's code in the compiled step: the keys a query does not see masked, so
  that the position and the window's start are data and one graph serves every step.
- `attend_kernel`, the compiled step's on a CPU where it applies: one C++ kernel per layer
  (`decode_attention`). Per row and KV head, in one pass: the group's queries scored against the
  row's own keys up to `pos`, one softmax over those and the prompt's scores (given: one GEMM over
  every row), the prompt's probabilities written out (for the GEMM with its values), and the
  weighted sum of the row's own values. Each key is read once for the whole group, and the next
  row's keys and values are prefetched while this row computes: at decode shapes attention is
  bound by reading the rows' own cache from memory, and inductor's code for the same thing makes
  several passes over the scores. Taking attention out of inductor's graph also makes the graph
  smaller, and its first compile shorter. What it gains: docs/results.md, "The decode step as one graph".

The kernel is C++ on `at::vec` (the vector types of inductor's own kernels), built by inductor's code
cache with its flags and OpenMP, once per machine: inductor's cache keeps it by its source. It is a
custom op (`specrej::decode_attention`), opaque to the graph.
"""

from __future__ import annotations

import functools

import torch

# {scalar}: at::BFloat16 or float; {kv_heads}, {group}, {head_dim}: the model's, so the loops over
# the group and the head's vector chunks have constant bounds
SOURCE = r"""
#include <torch/csrc/inductor/cpp_prefix.h>
#include <vector>

using Vec = at::vec::Vectorized<float>;
constexpr int64_t KV_HEADS = {kv_heads}, GROUP = {group}, HEAD_DIM = {head_dim};
constexpr int64_t VL = Vec::size(), CHUNKS = HEAD_DIM / VL;
static_assert(HEAD_DIM % VL == 0, "head_dim must be a multiple of the vector width");
using scalar_t = {scalar};

static inline Vec load_float(const float* p) {{ return Vec::loadu(p); }}
static inline Vec load_float(const at::BFloat16* p) {{
    return at::vec::convert<float>(at::vec::Vectorized<at::BFloat16>::loadu(p, Vec::size()));
}}

extern "C" void kernel(const scalar_t* q, const scalar_t* prompt_scores, const scalar_t* k, const scalar_t* v,
                       const int64_t* pos_ptr,
                       const int64_t* first_visible_ptr, scalar_t* prompt_probs, float* own_out,
                       const int64_t rows, const int64_t prompt_len, const int64_t row_stride,
                       const int64_t head_stride, const float scale)
{{
    const int64_t pos = *pos_ptr;
    // the oldest visible position (a sliding window's start; 0 without one), in the prompt and in the row's own
    const int64_t prompt_first = std::min(std::max(*first_visible_ptr, int64_t(0)), prompt_len);
    const int64_t own_first = std::max(*first_visible_ptr - prompt_len, int64_t(0));
    const int64_t own_count = pos + 1 - own_first;
    const int64_t width = prompt_len + own_count;
    #pragma omp parallel
    {{
        std::vector<float> scores(GROUP * width);
        #pragma omp for
        for (int64_t job = 0; job < KV_HEADS * rows; ++job) {{
            const int64_t head = job / rows, row = job % rows;
            const scalar_t* keys = k + row * row_stride + head * head_stride;
            const scalar_t* values = v + row * row_stride + head * head_stride;
            if (job + 1 < KV_HEADS * rows) {{  // the next job's keys and values, fetched while this one computes
                const int64_t next = ((job + 1) % rows) * row_stride + ((job + 1) / rows) * head_stride
                                     + own_first * HEAD_DIM;
                const char* next_keys = reinterpret_cast<const char*>(k + next);
                const char* next_values = reinterpret_cast<const char*>(v + next);
                for (int64_t b = 0; b < own_count * HEAD_DIM * int64_t(sizeof(scalar_t)); b += 64) {{
                    __builtin_prefetch(next_keys + b, 0, 3);
                    __builtin_prefetch(next_values + b, 0, 3);
                }}
            }}
            // q and the prompt's scores are [kv_heads, rows * group, ...]
            const int64_t query_row = (head * rows + row) * GROUP;
            Vec query[GROUP][CHUNKS];
            for (int64_t g = 0; g < GROUP; ++g)
                for (int64_t c = 0; c < CHUNKS; ++c)
                    query[g][c] = load_float(q + (query_row + g) * HEAD_DIM + c * VL);
            for (int64_t g = 0; g < GROUP; ++g) {{
                const scalar_t* given = prompt_scores + (query_row + g) * prompt_len;
                float* s = scores.data() + g * width;
                for (int64_t j = 0; j < prompt_first; ++j) s[j] = -std::numeric_limits<float>::infinity();
                for (int64_t j = prompt_first; j < prompt_len; ++j) s[j] = static_cast<float>(given[j]) * scale;
            }}
            for (int64_t t = 0; t < own_count; ++t) {{
                const scalar_t* key = keys + (own_first + t) * HEAD_DIM;
                Vec acc[GROUP];
                for (int64_t g = 0; g < GROUP; ++g) acc[g] = Vec(0.f);
                for (int64_t c = 0; c < CHUNKS; ++c) {{
                    const Vec kc = load_float(key + c * VL);
                    for (int64_t g = 0; g < GROUP; ++g) acc[g] = at::vec::fmadd(query[g][c], kc, acc[g]);
                }}
                for (int64_t g = 0; g < GROUP; ++g)
                    scores[g * width + prompt_len + t] = acc[g].reduce_add() * scale;
            }}
            for (int64_t g = 0; g < GROUP; ++g) {{
                float* s = scores.data() + g * width;
                // the largest score: whole vectors, then the tail one by one
                Vec top_vec(-std::numeric_limits<float>::infinity());
                const int64_t whole = width / VL * VL;
                for (int64_t j = 0; j < whole; j += VL) top_vec = at::vec::maximum(top_vec, Vec::loadu(s + j));
                float top = top_vec.reduce_max();
                for (int64_t j = whole; j < width; ++j) top = std::max(top, s[j]);
                Vec total_vec(0.f);
                for (int64_t j = 0; j < width; j += VL) {{
                    const int64_t n = std::min(width - j, VL);
                    const Vec e = (Vec::loadu(s + j, n) - Vec(top)).exp_u20();
                    e.store(s + j, n);
                    total_vec = total_vec + Vec::set(Vec(0.f), e, n);
                }}
                const float inverse = 1.f / total_vec.reduce_add();
                scalar_t* probs = prompt_probs + (query_row + g) * prompt_len;
                for (int64_t j = 0; j < prompt_len; ++j) probs[j] = static_cast<scalar_t>(s[j] * inverse);
                Vec out[CHUNKS];
                for (int64_t c = 0; c < CHUNKS; ++c) out[c] = Vec(0.f);
                for (int64_t t = 0; t < own_count; ++t) {{
                    const Vec p(s[prompt_len + t] * inverse);
                    const scalar_t* value = values + (own_first + t) * HEAD_DIM;
                    for (int64_t c = 0; c < CHUNKS; ++c) out[c] = at::vec::fmadd(p, load_float(value + c * VL), out[c]);
                }}
                float* dest = own_out + ((row * KV_HEADS + head) * GROUP + g) * HEAD_DIM;
                for (int64_t c = 0; c < CHUNKS; ++c) out[c].store(dest + c * VL);
            }}
        }}
    }}
}}
"""

SCALARS = {torch.bfloat16: "at::BFloat16", torch.float32: "float"}
ARGTYPES = ["const {s}*", "const {s}*", "const {s}*", "const {s}*", "const int64_t*", "const int64_t*",
            "{s}*", "float*", "const int64_t", "const int64_t", "const int64_t", "const int64_t", "const float"]


def supported(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether `decode_attention` runs for a model on `device` in `dtype` with heads of `head_dim`: a
    CPU, bfloat16 or float32, a head a whole number of 16-float vectors."""
    return device.type == "cpu" and dtype in SCALARS and head_dim % 16 == 0


@functools.cache
def compiled_kernel(scalar: str, kv_heads: int, group: int, head_dim: int):
    """The kernel for these constants, compiled at first use (inductor's code cache keeps it on disk,
    in the folder `graph_cache.inductor_cache` checks: a shared object loaded from there runs here)."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    from .graph_cache import inductor_cache

    source = SOURCE.format(scalar=scalar, kv_heads=kv_heads, group=group, head_dim=head_dim)
    with inductor_cache():
        return CppPythonBindingsCodeCache.load_pybinding([a.format(s=scalar) for a in ARGTYPES], source,
                                                         needs_vec_isa=True)


@torch.library.custom_op("specrej::decode_attention", mutates_args=())
def decode_attention(q_by_head: torch.Tensor, prompt_scores: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     pos: torch.Tensor, first_visible: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One query per row and head against the shared prompt's keys and the row's own keys up to `pos`.

    q_by_head [kv_heads, rows * group, d]; prompt_scores [kv_heads, rows * group, P] (the queries
    against the prompt's keys, unscaled); k, v [rows, kv_heads, L, d] (each row's own cache, the last
    two dimensions contiguous, the step's key and value already at `pos`); pos, first_visible: 0-d
    int64 (the generated position; the oldest position visible, counted from the prompt's start).
    Returns the prompt's probabilities [kv_heads, rows * group, P] (in q's dtype) and the weighted sum
    of the row's own values [rows, kv_heads, group, d] (float32)."""
    rows, kv_heads, _, head_dim = k.shape
    group = q_by_head.shape[1] // rows
    prompt_len = prompt_scores.shape[-1]
    if k.stride()[2:] != (head_dim, 1) or v.stride() != k.stride():
        raise ValueError(f"decode_attention: the cache's last two dimensions must be contiguous, not {k.stride()}")
    prompt_probs = q_by_head.new_empty(kv_heads, rows * group, prompt_len)
    own_out = q_by_head.new_empty(rows, kv_heads, group, head_dim, dtype=torch.float32)
    kernel = compiled_kernel(SCALARS[k.dtype], kv_heads, group, head_dim)
    kernel(q_by_head.contiguous(), prompt_scores.contiguous(), k, v, pos.to(torch.int64), first_visible.to(torch.int64),
           prompt_probs, own_out, rows, prompt_len, k.stride(0), k.stride(1), scale)
    return prompt_probs, own_out


@decode_attention.register_fake
def _decode_attention_shape(q_by_head, prompt_scores, k, v, pos, first_visible, scale):
    rows, kv_heads, _, head_dim = k.shape
    return (q_by_head.new_empty(prompt_scores.shape),
            q_by_head.new_empty(rows, kv_heads, q_by_head.shape[1] // rows, head_dim, dtype=torch.float32))


def attention_for(device: torch.device, dtype: torch.dtype, head_dim: int, compiled: bool):
    """The attention implementation of a decode step on `device` in `dtype`: eager, `attend_exact`;
    compiled, the C++ kernel where it runs (`supported`), else inductor's code (`attend_static`)."""
    if not compiled:
        return attend_exact
    return attend_kernel if supported(device, dtype, head_dim) else attend_static


def attend_exact(q, prompt_k, prompt_v, k, v, pos: int, first_visible: int, scale: float) -> torch.Tensor:
    """Attention over exactly the keys the query sees: q [rows, heads, 1, d]; prompt_k/v [kv_heads, P, d];
    k/v [rows, kv_heads, pos + 1, d], the rows' own, the step's at `pos`; `first_visible`, the oldest
    position seen (counted from the prompt's start), sliced to. The prompt part is one GEMM per KV
    head over every row's queries (the keys are shared)."""
    if first_visible > 0:  # an empty prompt part once the window lies within the generated tokens
        own = max(0, first_visible - prompt_k.shape[1])
        prompt_k, prompt_v = prompt_k[:, first_visible:], prompt_v[:, first_visible:]
        k, v = k[:, :, own:], v[:, :, own:]
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


def attend_static(q, prompt_k, prompt_v, k, v, pos, first_visible, scale: float) -> torch.Tensor:
    """Attention over the span of the rows' buffers that `k`/`v` [rows, kv_heads, span, d] are (the
    filled slots and a few more), the keys the query does not see masked: those after `pos` (0-d) and
    those before `first_visible` (0-d). q [rows, heads, 1, d]; prompt_k/v [kv_heads, P, d]."""
    rows, heads, _, d = q.shape
    kv_heads, prompt_len = prompt_k.shape[0], prompt_k.shape[1]
    group = heads // kv_heads
    own_positions = torch.arange(k.shape[2], device=q.device)
    prompt_visible = torch.arange(prompt_len, device=q.device) >= first_visible
    own_visible = (own_positions <= pos) & (own_positions + prompt_len >= first_visible)
    # the queries by KV head, a buffer the prompt's GEMM needs anyway; the rows' own scores read
    # it too, so that the graph does not recompute the queries' rotation for every key
    q_by_head = q.reshape(rows, kv_heads, group, d).transpose(0, 1).reshape(kv_heads, rows * group, d)
    prompt_scores = (q_by_head @ prompt_k.transpose(1, 2)).view(kv_heads, rows, group, prompt_len).transpose(0, 1)
    q = q_by_head.view(kv_heads, rows, group, d).transpose(0, 1)
    # products summed, not a batched GEMM: `k` is a slice of the buffer whose layout (contiguous
    # or not) would be a guard of the graph; a reduction reads any layout
    own_scores = (q[:, :, :, None] * k[:, :, None]).sum(-1)
    scores = torch.cat([prompt_scores.masked_fill(~prompt_visible, float("-inf")),
                        own_scores.masked_fill(~own_visible, float("-inf"))], dim=-1)
    probs = (scores.float() * scale).softmax(-1).to(q.dtype)
    prompt_probs, own_probs = probs.split([prompt_len, k.shape[2]], dim=-1)
    prompt_probs = prompt_probs.transpose(0, 1).reshape(kv_heads, rows * group, prompt_len)
    out = (prompt_probs @ prompt_v).view(kv_heads, rows, group, d).transpose(0, 1)
    out = out + (own_probs[..., None] * v[:, :, None]).sum(-2)
    return out.reshape(rows, heads, 1, d)


def attend_kernel(q, prompt_k, prompt_v, k, v, pos, first_visible, scale: float) -> torch.Tensor:
    """`attend_static` through the C++ kernel (`decode_attention`), which reads the rows' keys up to
    `pos` itself (k/v may be the whole buffers): the prompt's scores and weighted sum stay GEMMs
    over every row; the softmax and the rows' own keys are the kernel's."""
    rows, heads, _, d = q.shape
    kv_heads = prompt_k.shape[0]
    group = heads // kv_heads
    q_by_head = q.reshape(rows, kv_heads, group, d).transpose(0, 1).reshape(kv_heads, rows * group, d)
    prompt_probs, own_out = decode_attention(q_by_head, q_by_head @ prompt_k.transpose(1, 2), k, v, pos,
                                             first_visible, scale)
    out = (prompt_probs @ prompt_v).view(kv_heads, rows, group, d).transpose(0, 1) + own_out
    return out.to(q.dtype).reshape(rows, heads, 1, d)
