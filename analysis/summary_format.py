"""How the headline page (``analysis.summary_page``) writes its numbers and cells: scores,
percentages, counts, an estimate with its bootstrap interval (a censored limit reads ≥ or ≤),
where a setting lands against the Best-of-N curve in words, the compute measure in words
(``compute_words``), and tables and bullet lists of plain text. Formatting only: a value that is
not finite reads as ``analysis.tables.MISSING``.
"""

import math

import numpy as np
import pandas as pd

from analysis.page import Bullets, Strong, Table, Text, text
from analysis.tables import MISSING


def display_name(row: pd.Series) -> str:
    """A method's display name: its ``method_name``, else its ``method``."""
    name = row.get("method_name")
    return str(name) if isinstance(name, str) and name else str(row["method"])


def score_text(value: float) -> str:
    """An improvement score: whole above 100, one decimal below."""
    if not np.isfinite(value):
        return MISSING
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def percent(value: float) -> str:
    """A share as a whole percentage; one that rounds to zero reads "0%", never "-0%"."""
    return MISSING if not np.isfinite(value) else f"{round(100 * value) + 0:.0f}%"


def whole(value: float) -> str:
    """A count (N, a token, a prompt count) as a whole number."""
    return MISSING if not np.isfinite(value) else f"{round(value)}"


def maybe(prefix: str, value: float, formatter) -> str:
    """`prefix` and the formatted value; the missing mark for a value that is not finite."""
    return MISSING if not np.isfinite(value) else prefix + formatter(value)


def signed(value: float) -> str:
    """A difference with its sign, one decimal."""
    return MISSING if not np.isfinite(value) else f"{value:+.1f}"


def with_ci(row: pd.Series, column: str, formatter, unit: str = "") -> str:
    """"value<unit> [lo, hi]" from ``column``, ``column_lo``, ``column_hi`` (no brackets without
    an interval), e.g. "1.9× [1.7, 2.1]". A limit that is only a bound, because resamples beyond
    the Best-of-N curve were censored at its ends, reads "≥ hi" or "≤ lo"."""
    value, low, high = row[column], row.get(column + "_lo", math.nan), row.get(column + "_hi", math.nan)
    if not np.isfinite(value):
        return MISSING
    if not (np.isfinite(low) and np.isfinite(high)):
        return formatter(value) + unit
    bounds = "flops_speedup" if column == "flops_speedup" else "compute_speedup"
    censored = column in ("compute_speedup", "bon_equivalent_compute", "equivalent_n", "flops_speedup")
    at_most = "≤ " if censored and row.get(f"{bounds}_lo_is_bound", False) else ""
    at_least = "≥ " if censored and row.get(f"{bounds}_hi_is_bound", False) else ""
    return f"{formatter(value)}{unit} [{at_most}{formatter(low)}, {at_least}{formatter(high)}]"


def point_or_ci(row: pd.Series, column: str, formatter, unit: str = "") -> str:
    """``with_ci``, but a value whose interval is only itself (Bo-N_min's relative compute, 1 in
    every resample) reads without brackets."""
    value, low, high = row[column], row.get(column + "_lo", math.nan), row.get(column + "_hi", math.nan)
    if np.isfinite(value) and np.isfinite(low) and np.isfinite(high) and low == high == value:
        return formatter(value) + unit
    return with_ci(row, column, formatter, unit)


# The compute measure of the headline's compute column (``relative_compute``, eq. 7) in words: a
# short name for sentences and cells, and its definition for the notes. The measure is named by
# the caller or by the frame (``compute_measure_of``); one without an entry here is named as given.
COMPUTE_MEASURES = {
    "work": ("CPU seconds of the work",
             "CPU seconds of the work (device seconds on CUDA: the records' timing.compute_s, which other jobs on "
             "the machine do not move; wall-clock seconds for records without it)"),
    "modelled": ("modelled seconds", "seconds modelled from each record's recorded steps, costed on the "
                 "machine's calibration (specrej calibrate)"),
    "wall": ("wall-clock seconds", "wall-clock seconds of the runs (the records' timing.total_s)"),
    "flops": ("FLOPs", "FLOPs counted from the models' shapes (every prefill, generated and scored token)"),
}
DEFAULT_COMPUTE_MEASURE = "work"  # what analysis.metrics' relative_compute measures
COMPUTE_MEASURE_COLUMN = "compute_measure"


def compute_measure_of(frame: pd.DataFrame, measure: str | None = None) -> str:
    """The compute measure of ``frame``'s compute columns: ``measure`` when the caller names one,
    else the frame's ``compute_measure`` column (its first value), else what ``relative_compute``
    measures today (``DEFAULT_COMPUTE_MEASURE``)."""
    if measure:
        return str(measure)
    if COMPUTE_MEASURE_COLUMN in frame.columns:
        named = [value for value in frame[COMPUTE_MEASURE_COLUMN] if isinstance(value, str) and value]
        if named:
            return named[0]
    return DEFAULT_COMPUTE_MEASURE


def compute_words(measure: str) -> tuple[str, str]:
    """(short name, definition) of a compute measure (``COMPUTE_MEASURES``); a measure without
    an entry reads as its own name."""
    return COMPUTE_MEASURES.get(measure, (f"{measure} compute", f"the {measure!r} compute measure"))


def joined(labels: pd.Series) -> Text:
    """Labels in bold, joined "a, b and c"."""
    strong = [Strong(str(label)) for label in labels]
    parts: list = []
    for label in strong[:-1]:
        parts += [label, ", "]
    return text(*parts[:-1], " and " if parts else "", strong[-1])


def where_on_curve(row: pd.Series, bon_min: str, bon_max: str) -> str:
    """Where a setting lands against the Best-of-N curve (its ``bon_equivalent_status``), in words."""
    status = row["bon_equivalent_status"]
    if status == "above_range":
        return f"above the largest Best-of-N ({bon_max} = {score_text(row['bon_max_improvement'])})"
    if status == "below_range":
        return f"below {bon_min} ({score_text(row['bon_min_improvement'])}), the cheapest Best-of-N"
    if status == "interpolated":
        return "inside the Best-of-N range"
    return {"no_curve": "not located: the Best-of-N curve has no usable point",
            "no_score": "not located: its score is undefined"}.get(status, f"not located ({status})")


def bullets(notes: list[str]) -> Bullets:
    """A bullet list of plain sentences."""
    return Bullets(tuple(text(note) for note in notes))


def table(index: str, cells: list[dict]) -> Table:
    """A ``Table`` of rows given as {column: text or str}, ``index`` the first column."""
    columns = [index, *(column for column in cells[0] if column != index)] if cells else [index]
    return Table(tuple(columns), tuple(tuple(text(row[column]) if isinstance(row[column], str) else row[column]
                                             for column in columns) for row in cells))
