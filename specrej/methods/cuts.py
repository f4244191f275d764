"""The rejection rule of eq. 4-5, shared by the engine and the analysis (no torch: `analysis`
imports it), so both give the same set on the same scores."""

import math
from collections.abc import Hashable, Sequence
from typing import Protocol

# The official code's cap on SR's initial batch (speculative_rejection.py: min(..., 1000)).
DEFAULT_MAX_INIT_BATCH = 1000


def num_kept(n: int, alpha: float) -> int:
    """Rank of the cutoff among n scores: ceil((1 - alpha) * n), at least one.

    The product is rounded to 9 decimals first: (1 - 0.7) * 10 is 3.0000000000000004 in
    floating point, and a bare ceil would keep 4.
    """
    return max(1, math.ceil(round((1.0 - alpha) * n, 9)))


def rejection_cutoff(scores: Sequence[float], alpha: float) -> float:
    """r_cut of eq. 4, the alpha lower quantile of the partial scores: the ``num_kept``-th
    highest score, so that at least ceil((1 - alpha) * n) scores are at or above it."""
    if not scores:
        raise ValueError("no scores to cut")
    return sorted(scores, reverse=True)[num_kept(len(scores), alpha) - 1]


def accepted(scores: Sequence[float], alpha: float) -> list[bool]:
    """Eq. 5: a response goes on when its score is >= r_cut. Ties at the cutoff are all accepted,
    so more than ceil((1 - alpha) * n) may go on, and the set never depends on row order."""
    cutoff = rejection_cutoff(scores, alpha)
    return [score >= cutoff for score in scores]


class Cut(Protocol):
    """A rejection rule: given the round's candidate ids, their scores and the decision token,
    which are accepted, i.e. go on (eq. 5's role), and a record of why (`Round.rule`): `cutoff` at
    least, and `kept`, the cutoff's rank (`Round.kept`), for a rule that cuts at a rank."""

    def __call__(self, ids: Sequence[Hashable], scores: Sequence[float], tau: int) -> tuple[list[bool], dict]: ...

    def priority(self, ids: Sequence[Hashable], scores: Sequence[float]) -> list[float]:
        """After a call: which of the rows it let go on the memory guard halts first (the lowest)."""

    def describe(self) -> dict: ...


class AlphaCut:
    """The paper's rule, eq. 4-5, with one rejection rate alpha for every prompt and round."""

    def __init__(self, alpha: float):
        self.alpha = alpha

    def __call__(self, ids: Sequence[Hashable], scores: Sequence[float], tau: int) -> tuple[list[bool], dict]:
        cutoff = rejection_cutoff(scores, self.alpha)
        return [score >= cutoff for score in scores], {"rule": "alpha", "alpha": self.alpha, "cutoff": cutoff,
                                                       "kept": num_kept(len(scores), self.alpha)}

    def priority(self, ids: Sequence[Hashable], scores: Sequence[float]) -> list[float]:
        return list(scores)

    def describe(self) -> dict:
        return {"rule": "alpha", "alpha": self.alpha}

