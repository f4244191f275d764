"""ST-BoN (Self-Truncation Best-of-N, NeurIPS 2025): N responses are sampled together until
step c, the first step at which their prefixes are pairwise distinct (or one of them emits a
stop token), and on for tau = max(1, int(tau_coeff * c)) more steps. At each of the last tau
steps every row gets a Chain-of-Embedding (CoE) feature from its hidden states across layers;
the row whose feature is closest, in mean squared difference, to the other rows' gets that
step's vote. The row with the most votes is the only one continued to the end; no reward
model is used.

The pure functions below mirror `STBoNEarlyStopCriteria` (the truncation point and window) and
`CoECalculator` (features and scores) of the official code, with the same clamps and epsilons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

import torch

_NORM_EPS = 1e-8
_COS_EPS = 1e-7


def prefixes_distinct(prefixes: torch.Tensor) -> bool:
    """True when the N rows of the [N, t] token tensor are pairwise distinct."""
    return torch.unique(prefixes, dim=0).shape[0] == prefixes.shape[0]


def truncation_point(tokens: torch.Tensor, stop_token_ids: Collection[int]) -> int | None:
    """c: the first t (tokens generated) at which the rows of tokens[:, :t] are pairwise distinct
    or some row's t-th token is a stop token; None when no t <= T qualifies."""
    stops = torch.tensor(sorted({int(i) for i in stop_token_ids}), dtype=tokens.dtype, device=tokens.device)
    for t in range(1, tokens.shape[1] + 1):
        if prefixes_distinct(tokens[:, :t]) or bool(torch.isin(tokens[:, t - 1], stops).any()):
            return t
    return None


def window(c: int, tau_coeff: float) -> tuple[int, int]:
    """(tau, stop_step): tau = max(1, int(tau_coeff * c)) voting steps, sampling stops at c + tau."""
    tau = max(1, int(tau_coeff * c))
    return tau, c + tau


def _clamped_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine over the last dim, norms clamped at 1e-8, result clamped inside (-1, 1) so acos is finite."""
    cos = (a * b).sum(dim=-1) / (a.norm(dim=-1).clamp_min(_NORM_EPS) * b.norm(dim=-1).clamp_min(_NORM_EPS))
    return cos.clamp(-1.0 + _COS_EPS, 1.0 - _COS_EPS)


def coe_features(layer_states: torch.Tensor) -> torch.Tensor:
    """[L, N, H] hidden states (embedding output first) -> [N] float32 CoE features: the mean over
    l of ||h_l - h_{l+1}|| / ||h_0 - h_{L-1}|| - angle(h_l, h_{l+1}) / angle(h_0, h_{L-1});
    zeros when L <= 1."""
    if layer_states.dim() != 3:
        raise ValueError(f"expected [L, N, H] hidden states, got shape {tuple(layer_states.shape)}")
    hs = layer_states.detach().float()
    if hs.shape[0] <= 1:
        return torch.zeros(hs.shape[1], dtype=torch.float32, device=hs.device)
    first, last = hs[0], hs[-1]
    magnitude = (hs[:-1] - hs[1:]).norm(dim=-1) / (first - last).norm(dim=-1).clamp_min(_NORM_EPS)
    angle = torch.acos(_clamped_cosine(hs[:-1], hs[1:])) / torch.acos(_clamped_cosine(first, last)).clamp_min(_NORM_EPS)
    return (magnitude - angle).mean(dim=0)


def consistency_scores(features: torch.Tensor) -> torch.Tensor:
    """[N] features -> [N] float32: each row's mean squared difference to the other rows (zeros for N <= 1)."""
    feats = features.detach().float()
    n = feats.numel()
    if n <= 1:
        return torch.zeros_like(feats)
    # The diagonal is (f_i - f_i)^2 = 0, so the row sum is already the sum over the others.
    return (feats.unsqueeze(1) - feats.unsqueeze(0)).pow(2).sum(dim=1) / (n - 1)


def vote(scores: torch.Tensor) -> int:
    """The step's vote: the index of the smallest score (torch.argmin returns the first on ties)."""
    return int(torch.argmin(scores).item())


def winner(votes: Sequence[int]) -> int:
    """The index with the most votes, the lowest index on ties."""
    counts = Counter(votes)
    return min(counts, key=lambda idx: (-counts[idx], idx))
