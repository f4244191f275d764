"""Best-of-N: n responses sampled in batches, each scored when complete; the best is returned."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import MAX_ROWS, Display, Method, Param
from .registry import register

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import MethodSession


def best_of_n(session: MethodSession, params) -> dict:
    """Sample n responses in batches (the largest that fits the memory budget unless given),
    each batch's cache freed before the next is allocated; every complete response is scored
    (`Session.finish`) and the best is the answer."""
    max_new_tokens = session.sampling.max_new_tokens
    batch_size = session.full_length_batch(params.batch_size, params.n)
    for start in range(0, params.n, batch_size):
        rollout = session.start(min(batch_size, params.n - start), max_new_tokens)
        session.decode(rollout)
    return {"n": params.n, "batch_size": batch_size}


BEST_OF_N = register(Method(
    name="bon",
    description="Best-of-N",
    params=(
        Param("n", "int", required=True, low=1, high=MAX_ROWS, flag="--n", help="the number of responses, >= 1"),
        Param("batch_size", "int", low=1, high=MAX_ROWS, flag="--batch-size",
              help="responses per batch (default: the largest that fits the memory budget)"),
    ),
    run=best_of_n,
    label=lambda params: f"Bo{params['n']}",
    display=Display(name="Best-of-N", color="#fc8d62", marker="o", reference=True),
    batch_param="batch_size",
    setting_keys=("n",),
    step_seconds=0.054,  # the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
))
