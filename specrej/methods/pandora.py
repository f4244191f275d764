"""Pandora's-box Best-of-N (Kalayci, Raman & Dughmi 2025, "Optimal Stopping vs Best-of-N for
Inference Time Optimization", arXiv 2510.01394): responses are opened (sampled and scored) one
after another, and a Weitzman-style rule decides before each further one whether it is worth
its cost. The answer is the best response opened.

The rule, as the official code's cost experiment computes it (yhkalayci/adaptive-BoN,
algorithm/experiment_with_cost.py, `pandoras_box`, `find_tau_discrete_optimized`,
`MedianEstimator`), with n responses opened out of at most N:

- rewards become Bradley-Terry strengths x = exp(r) (the paper's transformation for reward
  scales that differ across prompts);
- the strengths are fitted online by a shifted exponential: loc = their median m (the upper
  median, x_(floor(n/2)) of the sorted n), scale s = max(mean of those >= it, in the upper half,
  minus m, floor);
- confidence factor b = sqrt(ln n * ln(1/delta) / n); the expected best of the draws,
  M = m + ln(N / divide) * s * (1 - b) (a lower confidence bound; delta = 0.05, divide = 5);
- utility f(x) = x / (x + M), the win rate against M; the fair cap tau solves
  E[(f(X) - tau)^+] = cost for X = m + Exp(s), searched in [0.001, 0.99] (brentq), 0.001 when
  the cost exceeds every excess and 0.99 when it is below every excess;
- after min_open = 20 responses, stop before opening another when f(v) > tau, v the best
  strength so far (strict); always stop at N.

Rounds: responses are generated in rounds of `round_size` (the largest batch the KV budget
holds, like Best-of-N's shards) and the rule is applied to them one at a time, in candidate
order, exactly as to the official code's sequence; the responses of the last round beyond the
stop are halted (they leave the final set) so the choice is the official one. With round_size
equal to Best-of-N's batch size and the same seed, the rounds are Best-of-N's first shards
token for token, and `replay` on Best-of-N's recorded rewards gives this method's decision.

Where it departs from the official code:

- the excess E[(f(X) - tau)^+] is integrated adaptively (scipy quad, after x = x0 + s t) rather
  than by a 4000-point sum up to the 99.99th percentile (differences ~1e-4 in tau);
- the strengths are exp((r - r_max) / reward_scale), r_max the best reward so far: the rule is
  invariant to that shift, and it cannot overflow; the scale floor is 1e-4 times the median
  (the official 1e-4 is absolute, on exp(r), so it is the same when the median reward is 0);
- the best-so-far starts at -inf (the official code starts it at -10, so a prompt whose rewards
  are all below -10, as a log-prob reward's can be, never stops and returns the first response);
- `reward_scale` (default 1, the paper's reward-model logits) divides the rewards first, a named
  option for rewards not on a Bradley-Terry scale;
- the rule's parameters are checked, before any model loads (`rule_problem`, the method's
  `requires`): min_open at most N, and enough to leave 1 - b > 0 (the official code would take
  a negative M); the message names the min_open that work.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import integrate, optimize

from ..errors import SpecrejError
from .base import MAX_ROWS, Display, Method, Param
from .registry import register
from .surface import Round

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import MethodSession

TAU_LOW, TAU_HIGH = 0.001, 0.99  # the official search interval for the fair cap
SCALE_FLOOR = 1e-4  # times the median strength


def confidence_factor(n: int, delta: float) -> float:
    """b = sqrt(ln n * ln(1/delta) / n)."""
    return math.sqrt(math.log(n) * math.log(1 / delta) / n)


def median_and_scale(strengths: Sequence[float]) -> tuple[float, float]:
    """(m, s): the upper median of the strengths and the mean of the upper half (those from it
    up, ceil(n/2) of them) minus it, floored at SCALE_FLOOR * m."""
    ordered = np.sort(np.asarray(strengths, dtype=np.float64))
    median = float(ordered[len(ordered) // 2])
    scale = float(ordered[len(ordered) // 2:].mean()) - median
    return median, max(scale, SCALE_FLOOR * median)


def expected_excess(tau: float, loc: float, scale: float, best: float) -> float:
    """E[(X / (X + best) - tau)^+] for X = loc + Exp(scale), 0 < tau < 1."""
    if tau >= 1:
        return 0.0
    x0 = max(loc, tau * best / (1 - tau))  # f(x0) = tau, or the support's start
    tail = math.exp(-(x0 - loc) / scale)
    if tail == 0.0:
        return 0.0
    # x = x0 + scale * t: the density from x0 on is tail * exp(-t) / scale
    value, _ = integrate.quad(lambda t: ((x0 + scale * t) / (x0 + scale * t + best) - tau) * math.exp(-t),
                              0, math.inf, epsabs=1e-12, epsrel=1e-10, limit=200)
    return tail * value


def fair_cap(loc: float, scale: float, best: float, cost: float) -> float:
    """tau with E[(f(X) - tau)^+] = cost, in [TAU_LOW, TAU_HIGH] (the bound when none is inside)."""
    def gap(tau):
        return expected_excess(tau, loc, scale, best) - cost
    if gap(TAU_LOW) <= 0:
        return TAU_LOW  # the cost exceeds every excess
    if gap(TAU_HIGH) >= 0:
        return TAU_HIGH  # the cost is below every excess
    return float(optimize.brentq(gap, TAU_LOW, TAU_HIGH, xtol=1e-8))


def _min_open_works(min_open: int, delta: float) -> bool:
    """The rule's estimate of the best stays above the median from min_open responses on: b < 1."""
    return confidence_factor(max(min_open, 2), delta) < 1


def rule_problem(n: int, min_open: int, delta: float) -> str | None:
    """Why the rule cannot run with N = `n`, `min_open` and `delta`, naming the values that work
    (None: it can): min_open at most N, and enough for delta that b < 1 at min_open
    (`confidence_factor`; the official code would take a negative estimate of the best)."""
    if min_open <= n and _min_open_works(min_open, delta):
        return None
    lowest = None  # the smallest min_open from which every value up to n works (b falls from n = 3 on)
    for m in range(n, 1, -1):
        if not _min_open_works(m, delta):
            break
        lowest = m
    if lowest is not None:
        works = (f"--param min_open from {lowest} to {n} works with --n {n} and --param delta={delta:g} "
                 "(min_open = N opens all N, as Best-of-N)")
    else:
        needed = next(m for m in itertools.count(3) if _min_open_works(m, delta))
        works = (f"--param delta={delta:g} needs min_open, and so --n, of at least {needed} (or raise --param "
                 "delta)")
    if min_open > n:
        return f"--param min_open ({min_open}) must be at most --n ({n}): {works}"
    return (f"--param min_open={min_open} is too few for --param delta={delta:g}: sqrt(ln n ln(1/delta) / n) must "
            f"be below 1 (the estimate of the best would be below the median); {works}")


@dataclass
class PandoraStopping:
    """The rule over a stream of rewards: `add` them in order; `decide` before each further
    response says whether to stop, and keeps its index values in `history`."""

    n_max: int
    cost: float
    delta: float = 0.05
    min_open: int = 20
    divide: float = 5.0
    reward_scale: float = 1.0
    rewards: list[float] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)

    def __post_init__(self):
        problem = rule_problem(self.n_max, self.min_open, self.delta)
        if problem:
            raise SpecrejError(problem)

    def add(self, reward: float) -> None:
        self.rewards.append(float(reward))

    @property
    def opened(self) -> int:
        return len(self.rewards)

    @property
    def best_index(self) -> int:
        """The first of the highest rewards opened (the official code keeps the first on ties)."""
        return int(np.argmax(self.rewards))

    def decide(self) -> bool:
        """True: stop now (before opening response `opened` + 1)."""
        n = self.opened
        if n >= self.n_max:
            return True
        if n < self.min_open:
            return False
        rewards = np.asarray(self.rewards, dtype=np.float64) / self.reward_scale
        top = float(rewards.max())
        if not math.isfinite(top):
            return False  # every reward -inf (e.g. empty responses): nothing to fit yet
        strengths = np.exp(rewards - top)  # the best is 1; the rule is invariant to the shift
        median, scale = median_and_scale(strengths)
        best_estimate = median + math.log(self.n_max / self.divide) * scale * (1 - confidence_factor(n, self.delta))
        tau = fair_cap(median, scale, best_estimate, self.cost)
        win_rate = 1.0 / (1.0 + best_estimate)
        stop = win_rate > tau
        self.history.append({"opened": n, "median": median, "scale": scale, "best_estimate": best_estimate,
                             "tau": tau, "win_rate": win_rate, "stop": stop})
        return stop


def replay(rewards: Sequence[float], **rule) -> PandoraStopping:
    """The rule run over `rewards` in order (e.g. Best-of-N's recorded final scores by candidate
    id): the returned rule's `opened` is where it stopped, `best_index` its choice."""
    stopping = PandoraStopping(**rule)
    for reward in rewards:
        stopping.add(reward)
        if stopping.decide():
            break
    return stopping


def pandora_best_of_n(session: MethodSession, params) -> dict:
    """Rounds of responses sampled to the end and scored; the rule read over them one at a time;
    the responses drawn beyond its stop leave the final set. One round records the decision."""
    stopping = PandoraStopping(n_max=params.n, cost=params.cost, delta=params.delta, min_open=params.min_open,
                               divide=params.divide, reward_scale=params.reward_scale)
    max_new_tokens = session.sampling.max_new_tokens
    round_size = session.full_length_batch(params.round_size, params.n, name="a round", option="--param round_size")
    decision = session.next_round
    rounds = drawn = 0
    stopped = False
    while not stopped:
        rollout = session.start(min(round_size, params.n - drawn), max_new_tokens)
        session.decode(rollout)
        batch = session.candidates[drawn:]
        if rollout.num_rows or not all(c.complete for c in batch):
            raise SpecrejError(f"a round of {len(batch)} responses did not complete in the memory budget; "
                               "lower --param round_size or raise the budget")
        rounds, drawn = rounds + 1, drawn + len(batch)
        for reward in session.score_final(batch):
            stopping.add(reward)
            if stopping.decide():
                stopped = True
                break
    unopened = session.candidates[stopping.opened:]
    if unopened:
        session.halt(unopened, decision)
    last = stopping.history[-1] if stopping.history else {}
    session.record_round(Round(
        decision_token=max_new_tokens, batch_before=drawn, batch_after=stopping.opened, ranked=drawn, rule={
            "rule": "pandora", "cost": params.cost, "best_index": stopping.best_index,
            "index": stopping.history,
            "measures": {"rounds": rounds, "samples_drawn": drawn, "samples_opened": stopping.opened,
                         # the last index values (0 when the rule never applied: n <= min_open)
                         "tau": last.get("tau", 0.0), "win_rate": last.get("win_rate", 0.0),
                         "stopped_by_rule": bool(last.get("stop")) and stopping.opened < params.n}}))
    return {"n": params.n, "cost": params.cost, "delta": params.delta, "min_open": params.min_open,
            "divide": params.divide, "reward_scale": params.reward_scale, "round_size": round_size}


PANDORA = register(Method(
    name="pandora",
    description="Pandora's-box Best-of-N: optimal stopping over whole samples",
    params=(
        Param("n", "int", required=True, low=1, high=MAX_ROWS, flag="--n", help="the most responses, N, >= 1"),
        Param("cost", "float", required=True, low=0, low_open=True,
              help="the cost of a response in win-rate units (the paper sweeps 6e-5 to 8e-3)"),
        Param("delta", "float", default=0.05, low=0, high=1, low_open=True, high_open=True,
              help="the confidence level of the estimate of the best (the official 0.05)"),
        Param("min_open", "int", default=20, low=2, high=MAX_ROWS,
              help="responses opened before the rule applies (the official 20), at most n"),
        Param("divide", "float", default=5.0, low=0, low_open=True,
              help="the best is estimated for N / divide draws (the official cost experiment's 5)"),
        Param("reward_scale", "float", default=1.0, low=0, low_open=True,
              help="strengths are exp(reward / reward_scale); 1 for reward-model logits (the paper)"),
        Param("round_size", "int", low=1, high=MAX_ROWS,
              help="responses per round (default: the largest batch the memory budget holds, at most n)"),
    ),
    run=pandora_best_of_n,
    label=lambda params: f"Pandora N={params['n']} c={params['cost']:g}",
    display=Display(name="Pandora BoN", color="#6a3d9a", marker="P"),
    batch_param="round_size",
    setting_keys=("n", "cost"),
    step_seconds=0.172,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
    requires=lambda p: rule_problem(p["n"], p["min_open"], p["delta"]),
))
