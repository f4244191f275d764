"""The sampler: `sample` draws each row's next token from hidden states (`draw`: the logits, then
`draw_logits`) and reads off its distribution what was asked for: the token's log-prob
(`token_logprobs`), the k largest log-probs (`top_logprobs`, DeepConf's confidence) and the
self-certainty (`self_certainty`, the reward-free score). Every draw is inverse-CDF sampling at one
uniform per row (`inverse_cdf`): plain sampling through `draw_plain`, which a compiled engine's
sampler graph traces too (`compiled.StaticSampler`), a top-k or top-p cut and greedy decoding
through `sample_next`. `sampler_bytes` bounds its memory."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .sampling import SamplingParams


def draw(model, hidden: torch.Tensor, params: SamplingParams, generator: torch.Generator
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from hidden states [rows, hidden] (`draw_logits` of `model.logits`) and
    its log-prob under the untempered distribution: (tokens, log-probs), each [rows]."""
    return draw_logits(model.logits(hidden), params, generator)


def draw_logits(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from fp32 logits [rows, vocab] and its log-prob under the untempered
    distribution: `draw_plain` where there is no cut, else `sample_next`."""
    if params.temperature > 0 and not params.top_k and params.top_p == 1:
        return draw_plain(logits, uniform(logits, generator), params.temperature)
    chosen = sample_next(logits, params, generator)
    return chosen, token_logprobs(logits, chosen)


def draw_plain(logits: torch.Tensor, u: torch.Tensor, temperature) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain sampling, eager and in the compiled sampler's graph: each row's token at its uniform
    draw u [rows, 1] of the distribution of fp32 logits [rows, vocab] at `temperature` (> 0; a 0-d
    tensor in a graph), and its log-prob under the untempered distribution, each [rows]. At
    temperature 1 (the float) the log-probs are read off the draw's own exponentials: one pass over
    the vocabulary fewer."""
    untempered = isinstance(temperature, float) and temperature == 1
    tempered = logits if untempered else logits / temperature
    top = tempered.amax(-1, keepdim=True)
    weights = (tempered - top).exp_()
    choice = inverse_cdf(weights, u)
    if untempered:  # log p = (logit - top) - log sum exp(logits - top)
        return choice.squeeze(-1), (tempered.gather(-1, choice) - top - weights.sum(-1, keepdim=True).log()).squeeze(-1)
    chosen = choice.squeeze(-1)
    return chosen, token_logprobs(logits, chosen)


@torch.inference_mode()
def sample(model, hidden: torch.Tensor, params: SamplingParams, generator: torch.Generator,
           chunk_rows: int, top_k: int = 0, certainty: bool = False, draw_tokens=draw,
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Next token and its log-prob for each row, from hidden states [rows, hidden] of `model` (a
    `decoding.ForwardPass`: its `logits`); with `top_k` > 0 the k largest log-probs of each row's
    distribution ([rows, k]), and with `certainty` each distribution's self-certainty ([rows],
    `self_certainty`); None for what was not asked. `draw_tokens` (default: `draw`) draws the
    tokens and their log-probs where nothing else is asked (a compiled engine's draws in one graph).

    Logits are made `chunk_rows` rows at a time: SR's initial batch can run to thousands of
    rows, and [rows, vocab] fp32 logits plus the sampler's temporaries would not fit.
    """
    tokens, logprobs, tops, certainties = [], [], [], []
    for chunk in hidden.split(chunk_rows):
        if not top_k and not certainty:
            chosen, logprob = draw_tokens(model, chunk, params, generator)
        else:
            logits = model.logits(chunk)
            chosen, logprob = draw_logits(logits, params, generator)
            if top_k:
                tops.append(top_logprobs(logits, top_k))
            if certainty:
                certainties.append(self_certainty(logits))
        tokens.append(chosen)
        logprobs.append(logprob)
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
    choice = inverse_cdf((logits - logits.amax(-1, keepdim=True)).exp_(), uniform(logits, generator))
    return (choice if candidates is None else candidates.gather(-1, choice)).squeeze(-1)


def uniform(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One uniform draw in [0, 1) per row of `logits`, [rows, 1]: inverse-CDF sampling's (cheaper
    than one exponential per vocabulary entry)."""
    return torch.rand(logits.shape[0], 1, generator=generator, device=logits.device)


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


def sampler_bytes(params: SamplingParams, rows: int, vocab: int) -> int:
    """The most bytes `sample` holds at once while it draws one chunk of `rows` rows over a
    vocabulary of `vocab`: fp32 [rows, vocab] copies and `inverse_cdf`'s blocks.

    Top-p: the logits, the tempered copy, the sorted values and their int64 indices (2), the
    softmax, its cumsum, the masked copy, then the shifted logits and their exponentials, of which
    at most about 7.5 at once: 8. Otherwise the logits, the tempered copy, the shifted logits and
    their exponentials: 4, and half a copy more for the lm_head output of a 16-bit model: 5.
    `inverse_cdf` adds the exponentials padded to whole blocks and the chosen block's weights and
    their cumulative sum: at most three blocks of CDF_BLOCK floats a row.
    """
    copies = 8 if params.top_p < 1 else 5
    return 4 * rows * (copies * vocab + 3 * CDF_BLOCK)


CDF_BLOCK = 256  # inverse_cdf's block (docs/results.md, "The decode step as one graph": the sizes tried)


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row, the first index where the cumulative sum of `weights` [rows, vocab] (non-negative,
    unnormalised probabilities) exceeds `u` [rows, 1] (uniform in [0, 1)) times their total: what
    `searchsorted(weights.cumsum(-1), u * total, right=True)` gives, [rows, 1], without writing the
    vocabulary's cumulative sum (a serial pass, the sampler's slowest): the sums of blocks of
    CDF_BLOCK entries, their cumulative sum, and the cumulative sum of the one block the draw falls in."""
    rows, vocab = weights.shape
    blocks = -(-vocab // CDF_BLOCK)
    if vocab % CDF_BLOCK:  # padded to whole blocks with zero weights
        weights = F.pad(weights, (0, blocks * CDF_BLOCK - vocab))
    weights = weights.view(rows, blocks, CDF_BLOCK)
    block_cdf = weights.sum(-1).cumsum(-1)
    target = u * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, target, right=True).clamp_max(blocks - 1)
    before = F.pad(block_cdf, (1, 0))[:, :-1].gather(-1, block)  # the blocks' totals before the chosen one
    within = weights.gather(1, block[:, :, None].expand(rows, 1, CDF_BLOCK)).squeeze(1).cumsum(-1)
    # kept below the block's own total, which rounds differently from its sum: the index found is
    # then always one of positive weight, never a zero-weight tail of the block
    rest = torch.minimum(target - before, within[:, -1:] * (1 - 2**-23))
    offset = torch.searchsorted(within, rest, right=True)
    return (block * CDF_BLOCK + offset).clamp_max(vocab - 1)
