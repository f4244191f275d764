"""Speculative Rejection (Algorithm 1, `algorithms.speculative_rejection`) with its two cut
rules: the paper's alpha cut (eq. 4-5), and the adaptive cut (paper §6, `adaptive.AdaptiveCut`)."""

from __future__ import annotations

from ..selection import DEFAULT_MAX_INIT_BATCH
from .base import Method, Param
from .registry import register


def schedule_params() -> tuple[Param, ...]:
    """The parameters of SR's schedule, shared by every method that runs it."""
    return (
        Param("batch_size", "int", low=1, flag="--batch-size",
              help="the initial batch b_init (default: as many rows as fit min_tokens tokens each)"),
        Param("min_tokens", "int", default=8, low=1, flag="--min-tokens",
              help="tokens generated before the first rejection"),
        Param("max_init_batch", "int", default=DEFAULT_MAX_INIT_BATCH, low=1, flag="--max-init-batch",
              help="cap on the default b_init (the official code's 1000)"),
        Param("decision_tokens", "ints", default=(), low=1, flag="--decision-tokens",
              help="extra decision tokens at fixed lengths, e.g. 16,32,64"),
    )


def run_schedule(engine, reward, prompt, *, sampling, seed, memory_budget, measure_memory, alpha, batch_size,
                 min_tokens, max_init_batch, decision_tokens, cut=None):
    """SR's schedule with `cut` deciding each round (None: the alpha cut)."""
    from ..algorithms import speculative_rejection

    return speculative_rejection(engine, reward, prompt, alpha=alpha, init_batch_size=batch_size,
                                 memory_budget=memory_budget, sampling=sampling, seed=seed, min_tokens=min_tokens,
                                 max_init_batch=max_init_batch, decision_tokens=decision_tokens,
                                 measure_memory=measure_memory, cut=cut)


ALPHA = Param("alpha", "float", required=True, low=0, high=1, high_open=True, flag="--alpha",
              help="the fraction of responses halted at each decision token, in [0, 1)")

SPECULATIVE_REJECTION = register(Method(
    name="sr",
    description="speculative rejection",
    params=(ALPHA, *schedule_params()),
    run=run_schedule,
    label=lambda params: f"SR α={params['alpha']:g}",
    batch_param="batch_size",
    setting_keys=("alpha",),
))


def _load_fit(params) -> dict:
    """The fit file read once per run file: final on partial reward per decision token."""
    kwargs = {key: value for key, value in params.items() if key != "fit"}
    kwargs["fits"] = None
    if params["fit"]:
        import pandas as pd

        from ..adaptive import fit_from_prefix_table
        from ..errors import SpecrejError

        try:
            kwargs["fits"] = fit_from_prefix_table(pd.read_parquet(params["fit"]))
        except (OSError, ValueError, KeyError) as error:
            raise SpecrejError(f"--fit {params['fit']}: cannot fit from it ({error})") from error
    return kwargs


def run_adaptive(engine, reward, prompt, *, alpha, delta, fits, **schedule):
    from ..adaptive import AdaptiveCut

    # a fresh rule per call: its online estimate is per prompt (and per out-of-memory retry)
    return run_schedule(engine, reward, prompt, alpha=alpha, cut=AdaptiveCut(delta, fits, fallback_alpha=alpha),
                        **schedule)


ADAPTIVE = register(Method(
    name="sr-adaptive",
    description="speculative rejection with the adaptive cut",
    params=(
        Param("delta", "float", default=0.05, low=0, high=0.5, flag="--delta",
              help="the chance, per round and under the fitted model, of halting the row that would end best"),
        Param("alpha", "float", default=0.5, low=0, high=1, high_open=True, flag="--alpha",
              help="the fixed-alpha cut of rounds without a fit"),
        Param("fit", "path", flag="--fit",
              help="a prefix table of this generator/reward pair to fit final on partial reward per decision token "
                   "(default: an online estimate per prompt)"),
        *schedule_params(),
    ),
    run=run_adaptive,
    label=lambda params: f"SR δ={params['delta']:g}",
    batch_param="batch_size",
    record_method="sr",
    load=_load_fit,
    setting_keys=("delta",),
))
