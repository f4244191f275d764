"""Sampling: the settings, one token per row from fp32 logits, and its log-probability.

Model-free: `decoding.sample` feeds it the logits of a chunk of rows at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import SpecrejError


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


def sampler_copies(params: SamplingParams) -> int:
    """fp32 [rows, vocab] tensors alive at once while `decoding.sample` draws one chunk, at most.

    Top-p: the logits, the tempered copy, the sorted values and their int64 indices (2), the
    softmax, its cumsum, the masked copy, the final softmax and cumsum, of which at most about
    7.5 at once (7 measured with budget.StorageTracker). Otherwise the logits, the tempered copy,
    the softmax and its cumsum: 4. Half a copy more for the lm_head output of a 16-bit model.
    """
    return 8 if params.top_p < 1 else 5
