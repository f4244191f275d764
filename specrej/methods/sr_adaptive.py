"""SR with the adaptive cut (paper §6, `adaptive_cut.AdaptiveCut`): SR's schedule, but a row is halted
only when even an optimistic projection of its final reward falls below a pessimistic projection
of the best row's, with a per-round risk delta of halting the row that would end best."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SpecrejError
from .adaptive_cut import AdaptiveCut
from .base import Display, Method, Param
from .registry import register
from .sr import schedule_params, speculative_rejection

if TYPE_CHECKING:  # torch-free at import: the workflow reads the declaration
    from .surface import MethodSession


def read_fit(path: str) -> dict:
    """The fit file, read once per run file: final on partial reward per decision token."""
    import pandas as pd

    from .adaptive_cut import fit_from_prefix_table

    try:
        return fit_from_prefix_table(pd.read_parquet(path))
    except (OSError, ValueError, KeyError) as error:
        raise SpecrejError(f"--fit {path}: cannot fit from it ({error})") from error


def run(session: MethodSession, params) -> dict:
    # a fresh rule per prompt: its online estimate is per prompt (and per out-of-memory retry)
    cut = AdaptiveCut(params.delta, params.loaded.get("fit"), fallback_alpha=params.alpha)
    return speculative_rejection(session, params, cut)


ADAPTIVE = register(Method(
    name="sr-adaptive",
    description="speculative rejection with the adaptive cut",
    params=(
        Param("delta", "float", default=0.05, low=0, high=0.5, flag="--delta",
              help="the chance, per round and under the fitted model, of halting the row that would end best"),
        Param("alpha", "float", default=0.5, low=0, high=1, high_open=True, flag="--alpha",
              help="the fixed-alpha cut of rounds without a fit"),
        Param("fit", "path", flag="--fit", read=read_fit,
              help="a prefix table of this generator/reward pair to fit final on partial reward per decision token "
                   "(default: an online estimate per prompt)"),
        *schedule_params(),
    ),
    run=run,
    label=lambda params: f"SR δ={params['delta']:g}",
    display=Display(name="SR adaptive", color="#8da0cb", marker="s"),
    batch_param="batch_size",
    record_method="sr",
    setting_keys=("delta",),
    step_seconds=0.112,  # SR's: the workflow's time estimate (docs/results.md, "Time estimates of the workflow")
))
