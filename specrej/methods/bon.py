"""Best-of-N: n responses sampled in batches, each scored when complete; the best is returned."""

from __future__ import annotations

from .base import Method, Param
from .registry import register


def run(engine, reward, prompt, *, sampling, seed, memory_budget, measure_memory, n, batch_size):
    from ..algorithms import best_of_n

    return best_of_n(engine, reward, prompt, n=n, batch_size=batch_size, memory_budget=memory_budget,
                     sampling=sampling, seed=seed, measure_memory=measure_memory)


BEST_OF_N = register(Method(
    name="bon",
    description="Best-of-N",
    params=(
        Param("n", "int", required=True, low=1, flag="--n", help="the number of responses, >= 1"),
        Param("batch_size", "int", low=1, flag="--batch-size",
              help="responses per batch (default: the largest that fits the memory budget)"),
    ),
    run=run,
    label=lambda params: f"Bo{params['n']}",
    batch_param="batch_size",
    setting_keys=("n",),
))
