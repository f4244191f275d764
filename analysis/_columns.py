"""Column-contract checks shared by the analysis modules."""

from collections.abc import Iterable

import pandas as pd


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` naming every column of the contract that ``frame`` lacks.

    Failing here, with the contract's name, beats a ``KeyError`` deep inside a groupby.
    """
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; it has {list(frame.columns)}")
