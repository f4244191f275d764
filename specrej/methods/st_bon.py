"""ST-BoN (Self-Truncation Best-of-N, NeurIPS 2025): N responses are sampled together until
step c, the first step at which their prefixes are pairwise distinct (or one of them emits a
stop token), and on for tau = max(1, int(tau_coeff * c)) more steps. At each of the last tau
steps every row gets a Chain-of-Embedding (CoE) feature from its hidden states across layers;
the row whose feature is closest, in mean squared difference, to the other rows' gets that
step's vote. The row with the most votes is the only one continued to the end; no reward
model is used.

The pure functions below mirror `STBoNEarlyStopCriteria` (the truncation point and window) and
`CoECalculator` (features and scores) of the official code (Alsace08/ST-BoN, decoders.py), with
the same clamps and epsilons; `SelfTruncation` is its stage 2, fed step by step, and
`self_truncation_best_of_n` the method on a `Session`. Where it departs from the official code:

- the hidden states come from the engine's forward pass in its dtype (bf16 on the default CPU
  config) and are summed in float32, as the official code casts them; the running mean is a
  cumulative sum per row ([layers + 1, N, hidden] float32), not every step's states kept;
- a row that ends with a stop token before the vote keeps the mean of the positions it fed;
  the official code's `generate` feeds it pad (= EOS) tokens to the end of stage 1 and averages
  their states in;
- the losers' last token (step c + tau) is not sampled: the vote reads the states up to step
  c + tau - 1 only (hidden_states[0..c+tau-1], the prompt's last position first), so the
  official code samples it and throws it away; the winner samples it from the same
  distribution, in place (no re-prefill, which the official stage 3 does);
- on a memory budget (the study's simulated device; the official code has none) the KV of N
  rows may fill before c + tau: `when_full` "vote" votes there, over the last tau steps so far
  (as the official code does when generation ends early), "fail" refuses the prompt;
- the running sums are held beside the KV budget (`Session.reserve`): the record's memory_margin_bytes counts them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ..errors import SpecrejError
from .base import MAX_ROWS, Display, Method, Param
from .registry import register
from .surface import Candidate, Round

if TYPE_CHECKING:  # the module stays torch-free at import: the workflow reads its declaration
    import torch

    from .surface import Batch, MethodSession

_NORM_EPS = 1e-8
_COS_EPS = 1e-7


def prefixes_distinct(prefixes: torch.Tensor) -> bool:
    """True when the N rows of the [N, t] token tensor are pairwise distinct."""
    return prefixes.unique(dim=0).shape[0] == prefixes.shape[0]


def truncation_point(tokens: torch.Tensor, stop_token_ids: Collection[int]) -> int | None:
    """c: the first t (tokens generated) at which the rows of tokens[:, :t] are pairwise distinct
    or some row's t-th token is a stop token; None when no t <= T qualifies."""
    stops = tokens.new_tensor(sorted({int(i) for i in stop_token_ids}))
    for t in range(1, tokens.shape[1] + 1):
        if prefixes_distinct(tokens[:, :t]) or bool((tokens[:, t - 1, None] == stops).any()):
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
        return hs.new_zeros(hs.shape[1])
    first, last = hs[0], hs[-1]
    magnitude = (hs[:-1] - hs[1:]).norm(dim=-1) / (first - last).norm(dim=-1).clamp_min(_NORM_EPS)
    angle = _clamped_cosine(hs[:-1], hs[1:]).acos() / _clamped_cosine(first, last).acos().clamp_min(_NORM_EPS)
    return (magnitude - angle).mean(dim=0)


def consistency_scores(features: torch.Tensor) -> torch.Tensor:
    """[N] features -> [N] float32: each row's mean squared difference to the other rows (zeros for N <= 1)."""
    feats = features.detach().float()
    n = feats.numel()
    if n <= 1:
        return feats.new_zeros(feats.shape)
    # The diagonal is (f_i - f_i)^2 = 0, so the row sum is already the sum over the others.
    return (feats.unsqueeze(1) - feats.unsqueeze(0)).pow(2).sum(dim=1) / (n - 1)


def vote(scores: torch.Tensor) -> int:
    """The step's vote: the index of the smallest score (argmin returns the first on ties)."""
    return int(scores.argmin().item())


def winner(votes: Sequence[int]) -> int:
    """The index with the most votes, the lowest index on ties."""
    counts = Counter(votes)
    return min(counts, key=lambda idx: (-counts[idx], idx))


class SelfTruncation:
    """ST-BoN's choice over a batch of `n` rows (candidate ids 0..n-1), observed step by step.

    `observe` after every decode step: it accumulates each live row's every-layer state of the
    token it fed (a row that left keeps its sums), detects c, and records the step's vote on the
    running means. votes[k] is the vote over positions 0..k (position 0: the prompt's last token,
    position j: generated token j - 1), the official code's end_pos = k + 1."""

    def __init__(self, n: int, tau_coeff: float, prompt_states: torch.Tensor):
        self.n, self.tau_coeff = n, tau_coeff
        layers, hidden = prompt_states.shape
        self.sums = prompt_states.float()[:, None].expand(layers, n, hidden).clone()
        self.counts = self.sums.new_ones(n)
        self.c = self.tau = self.stop_step = None
        self.votes = [self._vote()]

    @property
    def state_bytes(self) -> int:
        return self.sums.numel() * self.sums.element_size()

    def _vote(self) -> int:
        means = self.sums / self.counts[None, :, None]
        return vote(consistency_scores(coe_features(means)))

    def observe(self, rollout: Batch, completed: list[Candidate]) -> bool:
        """Take the step just made (`completed`: the candidates it completed); True once the votes
        up to step c + tau - 1 are in."""
        length = rollout.length
        if self.c is None and (any(c.finished for c in completed) or (
                rollout.num_rows and prefixes_distinct(rollout.tokens))):
            self.c = length
            self.tau, self.stop_step = window(length, self.tau_coeff)
        if rollout.num_rows:
            ids = rollout.candidate_ids
            self.sums[:, ids] += rollout.layer_states.float()
            self.counts[ids] += 1
            self.votes.append(self._vote())
        return self.stop_step is not None and length >= self.stop_step - 1

    def decide(self) -> tuple[int, dict]:
        """The winner over the last tau votes (all of them while c is unknown; at most as many as
        were taken), and the record of the choice."""
        taken = len(self.votes)
        tau = min(self.tau if self.tau is not None else taken, taken)
        window_votes = self.votes[taken - tau:]
        chosen = winner(window_votes)
        return chosen, {"rule": "st-bon", "tau_coeff": self.tau_coeff, "c": self.c, "tau": self.tau,
                        "stop_step": self.stop_step, "voted_steps": taken, "votes": window_votes, "winner": chosen}


def self_truncation_best_of_n(session: MethodSession, params) -> dict:
    """ST-BoN for one prompt: n rows sampled together until the vote (c + tau - 1 tokens, or
    earlier if they all end or the KV budget fills), the winner continued in place to the end
    and scored; the losers are halted by the vote (a loser that had already ended is halted too:
    the final set is the winner alone). The record's one round holds the choice."""
    n = params.n
    if session.rows_that_fit(1) < n:
        raise SpecrejError(f"ST-BoN's {n} rows do not fit one token each in the memory budget ({session.capacity} "
                           "tokens of KV); lower n or raise the budget")
    rollout = session.start(n, layer_states=True)
    choice = SelfTruncation(n, params.tau_coeff, session.prompt_layer_states)
    session.reserve(choice.state_bytes)
    while rollout.num_rows and session.make_room(rollout):
        if choice.observe(rollout, session.step(rollout)):
            break
    in_window = choice.stop_step is not None and rollout.length >= choice.stop_step - 1
    ended = "window" if in_window else "memory" if rollout.num_rows else "complete"
    if ended == "memory" and params.when_full == "fail":
        raise SpecrejError(f"ST-BoN's {n} rows filled the memory budget at token {rollout.length}, before its vote "
                           f"(c = {choice.c}); lower n, raise the budget, or use when_full=vote")
    chosen, rule = choice.decide()
    batch_before, decided_at = rollout.num_rows, rollout.length
    session.halt([c for c in session.candidates if c.id != chosen], session.next_round)
    session.record_round(Round(
        decision_token=decided_at, batch_before=batch_before, batch_after=rollout.num_rows, rule={
            **rule, "ended": ended, "state_bytes": choice.state_bytes,
            # per-prompt numbers the study's decisions table summarises over prompts
            "measures": {"c": choice.c, "tau": choice.tau, "c_plus_tau": choice.stop_step, "vote_token": decided_at,
                         "memory_ended": ended == "memory"}}))
    session.stop_layer_states(rollout)
    session.decode(rollout)
    return {"n": n, "tau_coeff": params.tau_coeff, "when_full": params.when_full}


ST_BON = register(Method(
    name="st-bon",
    description="ST-BoN, self-truncation Best-of-N without a reward",
    params=(
        Param("n", "int", required=True, low=1, high=MAX_ROWS, flag="--n",
              help="the number of responses sampled together, >= 1"),
        Param("tau_coeff", "float", default=1.0, low=0,
              help="tau = max(1, int(tau_coeff * c)) voting steps after c (the official code's 1.0)"),
        Param("when_full", "str", default="vote", choices=("vote", "fail"),
              help="if the KV budget fills before c + tau: vote on the steps so far, or fail the prompt"),
    ),
    run=self_truncation_best_of_n,
    label=lambda params: f"ST-BoN N={params['n']}",
    display=Display(name="ST-BoN", color="#a6d854", marker="^"),
    setting_keys=("n",),
    step_seconds=0.043,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
))
