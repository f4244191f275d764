"""Random-halting SR, a control: SR's schedule (the same decision tokens, the same number of rows
halted each round, eq. 4's ceil((1 - alpha) * n) kept), but the rows halted are a uniformly
random set instead of the lowest-scoring ones. Beside SR at the same alpha it tells how much
of SR's gain comes from the partial reward and how much from the schedule alone.

The partial responses are still scored each round, as SR scores them: the compute is SR's, the
rounds record the scores of what was halted, and only the choice ignores them. The draws come
from `random.Random(seed)` with the prompt's seed, so a rerun halts the same rows.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from .base import Display, Method
from .cuts import num_kept
from .registry import register
from .sr import ALPHA, schedule_params, speculative_rejection

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import MethodSession


class RandomCut:
    """Keep `num_kept(n, alpha)` of the round's n rows, drawn uniformly (`cuts.Cut`)."""

    def __init__(self, alpha: float, seed: int):
        self.alpha, self.seed = alpha, seed
        self.rng = random.Random(seed)
        self.draws: dict = {}

    def __call__(self, ids: Sequence[Hashable], scores: Sequence[float], tau: int) -> tuple[list[bool], dict]:
        self.draws = {i: self.rng.random() for i in ids}
        kept = num_kept(len(ids), self.alpha)
        chosen = set(sorted(ids, key=lambda i: -self.draws[i])[:kept])
        accept = [i in chosen for i in ids]
        cutoff = min(s for s, ok in zip(scores, accept) if ok)  # the lowest score that went on
        return accept, {"rule": "random", "alpha": self.alpha, "cutoff": cutoff, "kept": kept}

    def priority(self, ids: Sequence[Hashable], scores: Sequence[float]) -> list[float]:
        """The memory guard halts the lowest draws first: it must not use the reward either."""
        return [self.draws[i] for i in ids]

    def describe(self) -> dict:
        return {"rule": "random", "alpha": self.alpha, "seed": self.seed}


def run(session: MethodSession, params) -> dict:
    return speculative_rejection(session, params, RandomCut(params.alpha, session.seed))


RANDOM_HALTING = register(Method(
    name="sr-random",
    description="random-halting SR, the control",
    params=(ALPHA, *schedule_params()),
    run=run,
    label=lambda params: f"Random SR α={params['alpha']:g}",
    display=Display(name="Random SR", color="#e78ac3", marker="v"),
    batch_param="batch_size",
    setting_keys=("alpha",),
    step_seconds=0.097,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
))
