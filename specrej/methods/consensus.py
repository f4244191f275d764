"""Answer-consensus early stopping: Adaptive-Consistency (Aggarwal et al., EMNLP 2023, "Let's
Sample Step by Step: Adaptive-Consistency for Efficient Reasoning and Coding with LLMs"; code
Pranjal2041/AdaptiveConsistency, `BetaStoppingCriteria`) with its Beta stopping rule. Responses
are sampled until the answers agree: after each one, with v1 >= v2 the counts of the two most
frequent answers so far, the posterior probability that the leading answer is the majority is

    P(p1 > p2 | v1, v2) = P(X > 1/2),  X ~ Beta(v1 + 1, v2 + 1)

(a uniform prior on the two answers' share), and sampling stops once it reaches `threshold` (the
paper's 0.95), or at `n` responses. The answer is the majority vote over every response sampled
(`Method.selection` "vote": `records.answers.weighted_vote` with unit weights; ties go to the
answer whose best response scores highest), so it needs no reward model; the reward still scores
each response for the record.

Where it departs from the official code:

- responses come in waves of `wave` rows, one engine batch each, and the rule is checked after
  each wave (the official loop samples one at a time, `AC.eval_loop`). A wave of 1 is the
  official schedule; a larger wave stops up to wave - 1 responses later than it would, and costs
  less per response on hardware that batches (a step of 4 rows costs little more than one);
- a response whose answer cannot be extracted (`session.answer` is None) is no vote: the official
  code counts whatever its extractor returns, so agreement that there is no answer would stop it;
  here such a response neither stops sampling nor takes part in the vote (with no answer at all,
  the vote falls back to the reward's choice, eq. 6);
- the integral is scipy's Beta survival function, not `integrate.quad` over the unnormalised density.

Each wave is one round in the record: the answers counted so far, the leader, the posterior and
whether it stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .base import MAX_ROWS, Display, Method, Param
from .registry import register
from .surface import Round

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import MethodSession


def leader_posterior(counts: Iterable[int]) -> float:
    """The posterior probability that the most frequent answer is the majority, from the counts of
    every answer: P(X > 1/2) for X ~ Beta(v1 + 1, v2 + 1), v1 >= v2 the two largest counts (0 for
    an answer that is not there). No answers: 1/2."""
    from scipy.stats import beta  # scipy at call time: the declaration imports without it

    v1, v2, *_ = sorted(counts, reverse=True) + [0, 0]
    return float(beta.sf(0.5, v1 + 1, v2 + 1))


def consensus(session: MethodSession, params) -> dict:
    """Waves of `wave` responses (each to the end) until the leading answer's posterior reaches
    `threshold` or `n` responses are sampled; one round per wave. The answer is the majority vote
    (the method's `selection`)."""
    wave = session.full_length_batch(params.wave, params.n, option="--param wave")
    counts: Counter[str] = Counter()
    sampled = 0
    while sampled < params.n:
        rows = min(wave, params.n - sampled)
        batch = session.start(rows, session.sampling.max_new_tokens)
        completed = session.decode(batch)
        sampled += rows
        counts.update(answer for answer in map(session.answer, completed) if answer is not None)
        posterior = leader_posterior(counts.values())
        stop = posterior >= params.threshold
        ranked = counts.most_common(2) + [(None, 0), (None, 0)]
        session.record_round(Round(
            decision_token=batch.length, batch_before=rows, batch_after=0, rule={
                "rule": "consensus", "counts": dict(sorted(counts.items())), "leader": ranked[0][0],
                "posterior": posterior, "stop": stop,
                "measures": {"sampled": sampled, "posterior": posterior, "answers": len(counts),
                             "leader_votes": ranked[0][1], "runner_up_votes": ranked[1][1]}}))
        if stop:
            break
    return {"n": params.n, "wave": wave, "threshold": params.threshold}


CONSENSUS = register(Method(
    name="consensus",
    description="answer-consensus early stopping (Adaptive-Consistency's Beta rule), then majority vote",
    params=(
        Param("n", "int", required=True, low=1, high=MAX_ROWS, flag="--n",
              help="the most responses sampled, >= 1"),
        Param("wave", "int", default=4, low=1, high=MAX_ROWS,
              help="responses sampled together (one batch) between two checks of the stopping rule; "
                   "1 is the paper's one at a time"),
        Param("threshold", "float", default=0.95, low=0.5, high=1, low_open=True, high_open=True,
              help="stop once the posterior that the leading answer is the majority reaches it (the paper's 0.95)"),
    ),
    run=consensus,
    label=lambda params: f"Consensus N={params['n']} w={params.get('wave', 4)}"
                         + (f" p={params['threshold']:g}" if params.get("threshold", 0.95) != 0.95 else ""),
    display=Display(name="Consensus", color="#b8860b", marker="X"),
    batch_param="wave",
    setting_keys=("n", "wave", "threshold"),
    step_seconds=0.16,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
    selection="vote",
))
