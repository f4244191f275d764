"""Column contracts and row selection shared by the analysis modules."""

from collections.abc import Iterable

import numpy as np
import pandas as pd


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` naming every column of the contract that ``frame`` lacks.

    Failing here, with the contract's name, beats a ``KeyError`` deep inside a groupby.
    """
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; it has {list(frame.columns)}")


def rows_where(frame: pd.DataFrame, values: dict) -> pd.DataFrame:
    """Rows of ``frame`` whose columns equal ``values`` (all rows when ``values`` is empty), without
    those columns."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in values.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask].drop(columns=list(values))
