"""Sampling: the settings, one token per row from fp32 logits, and its log-probability.

Model-free: `decoding.sample` feeds it the logits of a chunk of rows at a time.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from ..errors import SpecrejError, shown

# The smallest positive temperature: below it the tempered fp32 logits overflow (1e-300 samples
# the last token id every time) and the draw is greedy anyway; vLLM's sampler takes the same
# 1e-5 as its "greedy" threshold. Use 0 for greedy decoding.
MIN_TEMPERATURE = 1e-5


def check_int(value, name: str, minimum: int) -> int:
    """`value` as an int >= `minimum`, or a SpecrejError naming the option `name` (e.g. --n).
    bool, floats (2.0 too) and strings are refused; numpy integers are taken."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecrejError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if value < minimum:
        raise SpecrejError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def is_real(value) -> bool:
    """A finite real number (not bool, NaN or +-inf): NaN passes `x < 0` checks unnoticed."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    max_new_tokens: int = 256

    def __post_init__(self):
        """Each setting checked (messages name the CLI option) and stored as a plain float / int,
        so a record's params are JSON and -0.0 is 0.0."""
        t = self.temperature
        if not is_real(t) or t < 0 or 0 < t < MIN_TEMPERATURE:
            raise SpecrejError(f"--temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g}, "
                               f"got {shown(t)}")
        if not is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise SpecrejError(f"--top-p must be in (0, 1], got {shown(self.top_p)}")
        object.__setattr__(self, "temperature", float(t) + 0.0)
        object.__setattr__(self, "top_p", float(self.top_p))
        object.__setattr__(self, "top_k", check_int(self.top_k, "--top-k", 0))
        object.__setattr__(self, "max_new_tokens", check_int(self.max_new_tokens, "--max-new-tokens", 1))


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


def top_logprobs(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest log-probabilities of each row's untempered distribution, [rows, k], largest
    first (the distribution `token_logprobs` reads)."""
    return logits.topk(min(k, logits.shape[-1]), dim=-1).values - logits.logsumexp(-1, keepdim=True)


def sampler_copies(params: SamplingParams) -> int:
    """fp32 [rows, vocab] tensors alive at once while `decoding.sample` draws one chunk, at most.

    Top-p: the logits, the tempered copy, the sorted values and their int64 indices (2), the
    softmax, its cumsum, the masked copy, the final softmax and cumsum, of which at most about
    7.5 at once (7 measured with budget.StorageTracker). Otherwise the logits, the tempered copy,
    the softmax and its cumsum: 4. Half a copy more for the lm_head output of a 16-bit model.
    """
    return 8 if params.top_p < 1 else 5
