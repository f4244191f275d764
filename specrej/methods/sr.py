"""Speculative Rejection, Algorithm 1 of Sun et al. (2024) with eq. 3-6, and the `sr` method (the
paper's alpha cut, eq. 4-5). Its schedule takes any cut rule (`cuts.Cut`): the random-halting
control (`random_halting.py`) and the adaptive cut (`sr_adaptive.py`) run it with theirs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import SpecrejError
from .base import MAX_ROWS, Display, Method, Param
from .cuts import DEFAULT_MAX_INIT_BATCH, AlphaCut, Cut
from .registry import register
from .surface import Candidate, Round

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import Batch, MethodSession


def speculative_rejection(session: MethodSession, params, cut: Cut) -> dict:
    """Algorithm 1. b_init (unless given, `params.batch_size`) is as many rows as the budget holds
    for `min_tokens` tokens each, at most `max_init_batch`. Generate until the KV cache would
    overflow the budget: that step is the decision token. Score the batch (live rows and the
    responses completed since the last decision), cut at r_cut and accept every response scoring
    >= r_cut (ties included); completed responses join the final set I for good. Repeat until no
    row is live; the answer is the best of I. `decision_tokens` adds decisions at fixed lengths
    (for studies). With alpha = 0 and b_init = N this is exactly Best-of-N."""
    b_init = params.batch_size or min(params.max_init_batch, session.rows_that_fit(params.min_tokens))
    if b_init < 1 or b_init * params.min_tokens > session.capacity:
        raise SpecrejError(f"an initial batch of {b_init} does not fit {params.min_tokens} tokens each in the memory "
                           f"budget ({session.capacity} tokens of KV); lower the batch size or raise the budget")
    rollout = session.start(b_init)  # lines 2-3
    while rollout.num_rows:  # line 4: b > 0
        session.decode(rollout, until=params.decision_tokens)  # line 5: until memory runs short
        if not rollout.num_rows:
            break
        batch = round_batch(session, rollout)  # line 6, eq. 3: live rows and newly completed responses
        ids, scores = [c.id for c in batch], [c.round_scores[-1] for c in batch]
        accept, why = cut(ids, scores, rollout.length)  # eq. 4-5: every score >= r_cut
        # line 7: completed responses are already in I. Memory guard: if the cut freed too little,
        # the survivors the cut ranks lowest that cannot take one more token are halted too.
        room = session.rows_that_fit(rollout.length + 1) if rollout.needs_room else None
        going_on, guard = memory_guard([c for c, ok in zip(batch, accept) if ok and not c.complete],
                                       dict(zip(ids, cut.priority(ids, scores))), room)
        index = session.record_round(Round(
            decision_token=rollout.length, batch_before=rollout.num_rows, batch_after=len(going_on), ranked=len(batch),
            rule={**why, "kept": why.get("kept", sum(accept)), "accepted": sum(accept),
                  "memory_guard_halted": len(guard)}))
        going_on_ids = {c.id for c in going_on}
        session.halt([c for c in batch if not c.complete and c.id not in going_on_ids], index)
    return {"alpha": params.alpha, "init_batch_size": b_init, "max_init_batch": params.max_init_batch,
            "min_tokens": params.min_tokens, "decision_tokens": sorted(set(params.decision_tokens)),
            "rejection": cut.describe()}


def round_batch(session: MethodSession, rollout: Batch) -> list[Candidate]:
    """Eq. 3's batch, best first: the live rows' partial responses and the responses completed
    since the last round (scored once, at their final length: that score is their partial one)."""
    live = session.live(rollout)
    completed = [c for c in session.candidates if c.complete and c.final_score is None]
    session.score_final(completed)
    for c, score in zip(live, session.score_partial(live)):
        c.round_scores.append(score)
    for c in completed:
        c.round_scores.append(c.final_score)
    return sorted(live + completed, key=lambda c: (-c.round_scores[-1], c.id))


def memory_guard(going_on: Sequence[Candidate], priority: dict[int, float], room: int | None
                 ) -> tuple[list[Candidate], list[Candidate]]:
    """The rows a cut let go on, split into those that fit `room` more rows (None: all) and those
    halted because they do not: the lowest `priority` are halted first (ties: the highest id)."""
    order = sorted(going_on, key=lambda c: (-priority[c.id], c.id))
    return (order, []) if room is None else (order[:room], order[room:])


def schedule_params() -> tuple[Param, ...]:
    """The parameters of SR's schedule, shared by every method that runs it."""
    return (
        Param("batch_size", "int", low=1, high=MAX_ROWS, flag="--batch-size",
              help="the initial batch b_init (default: as many rows as fit min_tokens tokens each)"),
        Param("min_tokens", "int", default=8, low=1, flag="--min-tokens",
              help="tokens generated before the first rejection"),
        Param("max_init_batch", "int", default=DEFAULT_MAX_INIT_BATCH, low=1, high=MAX_ROWS, flag="--max-init-batch",
              help="cap on the default b_init (the official code's 1000)"),
        Param("decision_tokens", "ints", default=(), low=1, flag="--decision-tokens",
              help="extra decision tokens at fixed lengths, e.g. 16,32,64"),
    )


ALPHA = Param("alpha", "float", required=True, low=0, high=1, high_open=True, flag="--alpha",
              help="the fraction of responses halted at each decision token, in [0, 1)")


def run(session: MethodSession, params) -> dict:
    return speculative_rejection(session, params, AlphaCut(params.alpha))


SPECULATIVE_REJECTION = register(Method(
    name="sr",
    description="speculative rejection",
    params=(ALPHA, *schedule_params()),
    run=run,
    label=lambda params: f"SR α={params['alpha']:g}",
    display=Display(name="SR", color="#66c2a5", marker="o"),
    batch_param="batch_size",
    setting_keys=("alpha",),
    step_seconds=0.112,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
))
