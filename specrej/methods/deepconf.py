"""DeepConf online (Fu et al. 2025, "Deep Think with Confidence"): N_init warm-up traces are
sampled to the end; each trace's lowest group confidence sets, at a percentile, a threshold;
every later trace is stopped as soon as its group confidence falls below it. The answer is
chosen among the completed traces by the reward model (`select: reward`) or, reward-free, as
the highest lowest-group-confidence (`select: confidence`).

Formulas, as the official code (facebookresearch/deepconf) computes them:

- token confidence C_t = -(1/k) sum_{j<=k} log P_t(j), the k = 20 largest log-probs of step t's
  untempered distribution (deepconf/utils.py `compute_confidence`, reading vLLM's `logprobs=20`,
  which vLLM returns from the raw logits; the early-stop processor, processors.py
  `ConfPerReqLogitsProcessor.compute_conf`, takes the top-k of softmax(logits) itself);
- group confidence: the mean of the last `window` token confidences; a trace's lowest group
  confidence is the minimum over its full windows, or the mean of all its confidences when it
  has fewer than `window` tokens (utils.py `compute_least_grouped`);
- threshold = np.percentile(warm-up lowest group confidences, 100 * (1 - eta)) (wrapper.py
  `_deepthink_online`, `100 - confidence_percentile`): eta = 0.1 is DeepConf-low, 0.9
  DeepConf-high (the official default, confidence_percentile = 90);
- a later trace stops at the first step whose window is full and whose mean is below the
  threshold (processors.py `__call__`: no stop while the window is filling).

Where it departs from the official code:

- `window` defaults to 16 tokens, not 2048: the study's responses are 64 tokens, where a window
  of 2048 (or 64) could never stop a trace before its end. 16 averages enough tokens to smooth
  single-token spikes and still lets a stop save up to 3/4 of a response (the paper's 2048 is
  1/8 to 1/16 of its traces; 1/16 of 64 is 4 tokens, too noisy to mean "a low stretch");
- exactly the top k log-probs are averaged: vLLM's logprobs dict also holds the sampled token
  when it is outside the top k (21 entries then); the official code's rounding of confidences
  and window means to 3 decimals is not done;
- a stopped trace keeps the token that crossed the threshold and is halted (its KV freed); the
  official processor replaces that token by EOS, so the count of generated tokens is the same;
- the answer: the official code votes on extracted answers (majority over the warm-up traces at
  or above the threshold and the later traces not stopped); a chat response has no answer to
  vote on, so `select: reward` lets the reward model pick among every completed trace (with
  n_init = n this is Best-of-N's choice) and `select: confidence` keeps the completed trace with
  the highest lowest group confidence (the official vote's weight), the lowest id on ties;
- traces run in batches that the KV budget holds (the official code submits them all to vLLM).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecrejError
from .base import MAX_ROWS, Display, Method, Param
from .registry import register
from .surface import Round

if TYPE_CHECKING:  # the module stays torch-free at import: the workflow reads its declaration
    import torch

    from .surface import MethodSession


def token_confidence(top_logprobs: torch.Tensor) -> torch.Tensor:
    """[rows, k] largest log-probs of each row's distribution -> [rows] float32 confidences
    -(1/k) sum_j log P(j); larger is more confident."""
    if top_logprobs.dim() != 2:
        raise ValueError(f"expected [rows, k] log-probs, got shape {tuple(top_logprobs.shape)}")
    return -top_logprobs.float().mean(dim=-1)


def group_confidences(confidences: Sequence[float], window: int) -> list[float]:
    """The mean of every full window of `window` consecutive token confidences; a trace shorter
    than the window has one group, the mean of all it has (an empty trace: none)."""
    values = np.asarray(confidences, dtype=np.float64)
    if len(values) < window:
        return [float(values.mean())] if len(values) else []
    sums = np.convolve(values, np.ones(window), mode="valid")
    return (sums / window).tolist()


def lowest_group_confidence(confidences: Sequence[float], window: int) -> float:
    """A trace's lowest group confidence (-inf for an empty trace: it ranks last)."""
    groups = group_confidences(confidences, window)
    return min(groups) if groups else float("-inf")


def threshold(lowest_confidences: Sequence[float], eta: float) -> float:
    """The stopping threshold from the warm-up traces' lowest group confidences: their
    100 * (1 - eta) percentile, linearly interpolated (numpy's default), so that a share eta of
    the warm-up traces lies at or above it."""
    if not len(lowest_confidences):
        raise ValueError("no warm-up trace to set the threshold")
    return float(np.percentile(np.asarray(lowest_confidences, dtype=np.float64), 100 * (1 - eta)))


class TraceConfidences:
    """Each candidate's token confidences as its steps come in; with a `stop_below` threshold,
    `observe` names the candidates whose window just filled or slid to a mean below it."""

    def __init__(self, window: int, stop_below: float | None = None):
        self.window, self.stop_below = window, stop_below
        self.confidences: dict[int, list[float]] = {}
        self.stopped_at: dict[int, int] = {}  # candidate id -> tokens generated when stopped

    def observe(self, candidate_ids: Iterable[int], confidences: Iterable[float]) -> list[int]:
        to_stop = []
        for cid, conf in zip(candidate_ids, confidences):
            trace = self.confidences.setdefault(cid, [])
            trace.append(float(conf))
            if (self.stop_below is not None and len(trace) >= self.window
                    and sum(trace[-self.window:]) / self.window < self.stop_below):
                self.stopped_at[cid] = len(trace)
                to_stop.append(cid)
        return to_stop

    def lowest(self, candidate_id: int) -> float:
        return lowest_group_confidence(self.confidences.get(candidate_id, []), self.window)


def most_confident(lowest_by_id: dict[int, float]) -> int:
    """The candidate with the highest lowest group confidence, the lowest id on ties."""
    return min(lowest_by_id, key=lambda cid: (-lowest_by_id[cid], cid))


def _sample(session: MethodSession, rows: int, k: int, confidences: TraceConfidences, decision: int) -> None:
    """One batch of `rows` traces to the end, each step's token confidences observed; rows
    the observer names are halted by round `decision`."""
    max_new_tokens = session.sampling.max_new_tokens
    rollout = session.start(rows, max_new_tokens, top_logprobs=k)
    while rollout.num_rows:
        if not session.make_room(rollout):
            raise SpecrejError(f"DeepConf's batch of {rows} rows filled the memory budget at token {rollout.length}; "
                               "lower --batch-size or raise the budget")
        session.step(rollout)
        ids = rollout.sampled_ids.tolist()
        to_stop = confidences.observe(ids, token_confidence(rollout.top_logprobs).tolist())
        if to_stop:
            session.halt([session.candidates[cid] for cid in to_stop], decision)


def deepconf(session: MethodSession, params) -> dict:
    """DeepConf online for one prompt: the warm-up traces in batches, the threshold, the later
    traces in batches with their early stops, then the choice. One round records it all."""
    n, n_init, window, k = params.n, params.n_init, params.window, params.k
    max_new_tokens = session.sampling.max_new_tokens
    batch_size = session.full_length_batch(params.batch_size, option="--batch-size")
    decision = session.next_round  # the one round this run records, which the halts name

    warmup = TraceConfidences(window)
    for start in range(0, n_init, batch_size):
        _sample(session, min(batch_size, n_init - start), k, warmup, decision)
    warmup_ids = sorted(warmup.confidences)
    warmup_lowest = [warmup.lowest(cid) for cid in warmup_ids]
    bar = threshold(warmup_lowest, params.eta)

    later = TraceConfidences(window, stop_below=bar)
    for start in range(0, n - n_init, batch_size):
        _sample(session, min(batch_size, n - n_init - start), k, later, decision)

    complete = [c for c in session.candidates if c.complete]
    lowest = {cid: warmup.lowest(cid) for cid in warmup_ids} | {cid: later.lowest(cid) for cid in later.confidences}
    # the official vote: the warm-up traces at or above the threshold and every later trace that
    # completed, each weighted by its confidence (a problem's answers are voted on in analysis)
    voters = {c.id: lowest[c.id] for c in complete if c.id not in warmup_ids or lowest[c.id] >= bar}
    chosen = None
    if params.select == "confidence" and complete:
        chosen = most_confident({c.id: lowest[c.id] for c in complete})
        session.halt([c for c in complete if c.id != chosen], decision)  # the others leave the final set
    later_tokens = sum(len(v) for v in later.confidences.values())
    session.record_round(Round(
        decision_token=window, batch_before=n - n_init, batch_after=n - n_init - len(later.stopped_at), rule={
            "rule": "deepconf", "select": params.select, "threshold": bar, "chosen": chosen,
            "vote_weights": {str(cid): weight for cid, weight in sorted(voters.items())},
            "lowest_group_confidence": {str(cid): lowest[cid] for cid in sorted(lowest)},
            "stopped_at": {str(cid): t for cid, t in sorted(later.stopped_at.items())},
            "measures": {
                "threshold": bar,
                "warmup_traces": n_init,
                "later_traces": n - n_init,
                "traces_stopped": len(later.stopped_at),
                "tokens_at_stop_sum": sum(later.stopped_at.values()),
                "later_tokens": later_tokens,
                "later_tokens_full": (n - n_init) * max_new_tokens,
            }}))
    return {"n": n, "n_init": n_init, "window": window, "k": k, "eta": params.eta, "select": params.select,
            "batch_size": batch_size}


DEEPCONF = register(Method(
    name="deepconf",
    description="DeepConf online: early stop on the generator's group confidence",
    params=(
        Param("n", "int", required=True, low=1, high=MAX_ROWS, flag="--n",
              help="traces in all (warm-up and later), >= 1"),
        Param("n_init", "int", default=16, low=1, high=MAX_ROWS,
              help="warm-up traces that set the threshold (the paper's 16), at most n"),
        Param("window", "int", default=16, low=1,
              help="tokens per group confidence (the paper's 2048 is for traces of thousands of tokens; "
                   "16 suits 64-token responses)"),
        Param("k", "int", default=20, low=1, help="top log-probs per token confidence (the paper's 20)"),
        Param("eta", "float", default=0.9, low=0, high=1, low_open=True,
              help="share of warm-up traces kept above the threshold: 0.1 DeepConf-low, 0.9 DeepConf-high "
                   "(the official default)"),
        Param("select", "str", default="reward", choices=("reward", "confidence"),
              help="the answer: the reward model's best completed trace, or the highest lowest group confidence"),
        Param("batch_size", "int", low=1, high=MAX_ROWS, flag="--batch-size",
              help="traces per batch (default: the largest that fits the memory budget)"),
    ),
    run=deepconf,
    label=lambda params: f"DeepConf N={params['n']} η={params.get('eta', 0.9)}",
    display=Display(name="DeepConf", color="#8c564b", marker="D"),
    batch_param="batch_size",
    setting_keys=("n", "eta"),
    step_seconds=0.110,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
    requires=lambda p: f"--param n_init ({p['n_init']}) must be at most --n ({p['n']})" if p["n_init"] > p["n"] else None,
))
