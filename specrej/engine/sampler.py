"""The sampler: `sample` draws each row's next token from hidden states (`sample_next`: temperature,
top-k, top-p) and reads off its distribution what was asked for: the token's log-prob
(`token_logprobs`), the k largest log-probs (`top_logprobs`, DeepConf's confidence) and the
self-certainty (`self_certainty`, the reward-free score). `sampler_copies` bounds its memory."""

from __future__ import annotations

import math

import torch

from .sampling import SamplingParams


@torch.inference_mode()
def sample(model, hidden: torch.Tensor, params: SamplingParams, generator: torch.Generator,
           chunk_rows: int, top_k: int = 0, certainty: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Next token and its log-prob for each row, from hidden states [rows, hidden] of `model` (a
    `decoding.ForwardPass`: its `logits` and `sample_plain`); with `top_k` >
    0 the k largest log-probs of each row's distribution ([rows, k]), and with `certainty` each
    distribution's self-certainty ([rows], `self_certainty`); None for what was not asked.

    Logits are made `chunk_rows` rows at a time: SR's initial batch can run to thousands of
    rows, and [rows, vocab] fp32 logits plus the sampler's temporaries would not fit. Plain
    sampling goes through the forward pass's own `sample_plain` where it has one (a compiled
    forward pass: one graph, `compiled.StaticSampler`).
    """
    if not top_k and not certainty and params.temperature > 0 and not params.top_k and params.top_p == 1:
        drawn = [model.sample_plain(chunk, params.temperature, generator) for chunk in hidden.split(chunk_rows)]
        if drawn[0] is not None:
            return torch.cat([t for t, _ in drawn]), torch.cat([lp for _, lp in drawn]), None, None
    tokens, logprobs, tops, certainties = [], [], [], []
    for chunk in hidden.split(chunk_rows):
        logits = model.logits(chunk)
        chosen = sample_next(logits, params, generator)
        tokens.append(chosen)
        logprobs.append(token_logprobs(logits, chosen))
        if top_k:
            tops.append(top_logprobs(logits, top_k))
        if certainty:
            certainties.append(self_certainty(logits))
    return (torch.cat(tokens), torch.cat(logprobs), torch.cat(tops) if top_k else None,
            torch.cat(certainties) if certainty else None)


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


def self_certainty(logits: torch.Tensor) -> torch.Tensor:
    """Each row's self-certainty (Kang et al. 2025): KL(U || p), the divergence from the uniform
    distribution over the V columns to the row's untempered distribution p = softmax(logits),
    -log V - mean_j log p_j; 0 for a uniform p, larger the more peaked. [rows, V] -> [rows]."""
    return logits.logsumexp(-1) - logits.mean(-1) - math.log(logits.shape[-1])


def sampler_copies(params: SamplingParams) -> int:
    """fp32 [rows, vocab] tensors alive at once while `sample` draws one chunk, at most.

    Top-p: the logits, the tempered copy, the sorted values and their int64 indices (2), the
    softmax, its cumsum, the masked copy, the final softmax and cumsum, of which at most about
    7.5 at once (7 measured with budget.StorageTracker). Otherwise the logits, the tempered copy,
    the softmax and its cumsum: 4. Half a copy more for the lm_head output of a 16-bit model.
    """
    return 8 if params.top_p < 1 else 5
