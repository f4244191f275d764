"""Each method setting's decisions, summarised over prompts: how many rounds it took, the token
at which the first decision came, and the numbers the method recorded for each of its decisions
(``rounds[i]["rule"]["measures"]``, e.g. a cut's threshold and the token it came at): a first
round's measure under its own name, a later round's as "NAME (round K)". No method is named
here: a method reports what it wants tabulated by putting it in ``measures``."""

import math
from collections.abc import Iterable

import pandas as pd

from analysis.io import record_configuration

DECISION_COLUMNS = ["method", "method_label", "prompt_id", "num_rounds", "first_decision_token"]


def decision_rows(records: Iterable[dict]) -> pd.DataFrame:
    """One row per answered record: DECISION_COLUMNS, then ``measure:<name>`` for each numeric
    (or boolean) measure of its first round and ``measure:<name> (round K)`` for round K >= 2;
    a measure the record left null is NaN."""
    rows = []
    for record in records:
        if "error" in record or record.get("best") is None:
            continue
        method, _, _, label = record_configuration(record)
        rounds = record.get("rounds") or []
        first = rounds[0] if rounds else {}
        row = {"method": method, "method_label": label, "prompt_id": str(record["prompt_id"]),
               "num_rounds": len(rounds), "first_decision_token": first.get("decision_token", math.nan)}
        for number, decision in enumerate(rounds, start=1):
            for name, value in ((decision.get("rule") or {}).get("measures") or {}).items():
                if value is None or isinstance(value, (bool, int, float)):
                    column = f"measure:{name}" if number == 1 else f"measure:{name} (round {number})"
                    row[column] = math.nan if value is None else float(value)
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else DECISION_COLUMNS)


def decision_table(rows: pd.DataFrame, by: Iterable[str] = ("method_label",)) -> pd.DataFrame:
    """Per group of ``by`` and quantity (rounds, first decision token, each measure): over the
    group's prompts that have it, its median, minimum, maximum and mean (a boolean's mean is the
    share of prompts where it held), and ``missing``, the prompts without it (e.g. a measure
    the method could not take on some prompts). Indexed by ``by`` and
    ``quantity``."""
    by = list(by)
    measures = [c for c in rows.columns if c.startswith("measure:")]
    values = ["num_rounds", "first_decision_token", *sorted(measures, key=_round_then_name)]
    out = []
    for key, group in rows.groupby(by, sort=False):
        labels = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for column in values:
            present = group[column].dropna()
            if present.empty:
                continue
            out.append({**labels, "quantity": column.removeprefix("measure:"), "prompts": len(group),
                        "median": present.median(), "min": present.min(), "max": present.max(),
                        "mean": present.mean(), "missing": len(group) - len(present)})
    columns = [*by, "quantity", "prompts", "median", "min", "max", "mean", "missing"]
    return pd.DataFrame(out, columns=columns).set_index([*by, "quantity"])


def _round_then_name(column: str) -> tuple[int, str]:
    """The order of measure columns: by round (the first round's have no suffix), then by name."""
    name, _, number = column.removesuffix(")").partition(" (round ")
    return (int(number) if number.isdigit() else 1, name)
