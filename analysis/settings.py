"""The configuration key of the analysis: a record's *setting*, and how settings are named,
ordered, drawn and told apart.

The engine writes into every record's ``params["setting"]`` the method that ran and its
resolved parameters, ``{"method": NAME, "params": {...}, "label": "SR α=0.5", "display": {...}}``.
The analysis groups records by (method, setting), where ``setting`` is the canonical JSON text of
those parameters (``specrej.methods.base.canonical``), and names each configuration by its
``label``.  ``display`` is the method's declaration as drawn: ``{"name": "SR", "color":
"#1f77b4", "marker": "o", "reference": false}``; the method whose ``reference`` is true
(Best-of-N) is the curve every other method is measured against (eq. 7-8 normalise by its
smallest N, the BoN-equivalent compute is read off its curve), and its settings are ``{"n": N}``.
A record without ``display`` is drawn with ``fallback_display``.

The analysis never reads a method's parameters itself, except the reference's ``n``.  A study of
one method (``analysis.adaptive_study``, SR's §6 study) may read that method's own parameters
back with ``setting_params``.
"""

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from specrej.methods.base import canonical  # torch-free: the engine's own configuration key

# Colours of methods without a declared one, in order of first appearance (matplotlib's tab10).
FALLBACK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf")
FALLBACK_MARKER = "o"
# A configuration's display, one column each in the runs frame and the method summary.
DISPLAY_COLUMNS = ("method_name", "color", "marker", "reference")
_DISPLAY_KEYS = {"method_name": "name", "color": "color", "marker": "marker", "reference": "reference"}
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@functools.cache
def _declared_references() -> frozenset[str]:
    from specrej.methods import built_in  # the declarations, torch-free

    return frozenset(name for name, method in built_in().items() if method.display and method.display.reference)


def declared_reference(method: str) -> bool:
    """Whether ``method`` is a built-in method declared the reference (Best-of-N): the fallback
    for a record that carries no ``display``."""
    return method in _declared_references()


def reference_label(n: float | str) -> str:
    """The label of the reference method's run with ``n`` responses (its declaration's `label`,
    e.g. "Bo16" for Best-of-N); ``n`` may be text already formatted (a count with its interval)."""
    from specrej.methods import built_in

    reference = built_in()[min(_declared_references())]
    return reference.label({"n": n if isinstance(n, str) else int(n)})


def canonical_setting(params: Mapping) -> str:
    """The configuration key of a setting's parameters (``canonical``): equal settings give
    equal text whatever order the record wrote them in."""
    return canonical(dict(params))


def record_display(setting: Mapping) -> dict:
    """A setting's ``display`` as DISPLAY_COLUMNS (None where the record has no value)."""
    display = setting.get("display") or {}
    return {column: display.get(key) if _present(display.get(key)) else None for column, key in _DISPLAY_KEYS.items()}


def with_display(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (one row per configuration and prompt, a ``method`` column) with DISPLAY_COLUMNS
    complete: a method's value is the first its rows carry; a method without one gets the
    fallback: its name is ``method``, its colour the next of ``FALLBACK_COLORS`` not declared by
    another method (in order of first appearance), its marker "o", and it is the reference when
    its declaration says so (``declared_reference``)."""
    frame = frame.copy()
    methods = list(dict.fromkeys(frame["method"]))
    declared = {}
    for column in DISPLAY_COLUMNS:
        values = frame[column] if column in frame.columns else pd.Series(None, index=frame.index, dtype=object)
        declared[column] = {method: next((v for v in values[frame["method"] == method] if _present(v)), None)
                            for method in methods}
    taken = {color for color in declared["color"].values() if color is not None}
    free = iter([color for color in FALLBACK_COLORS if color not in taken] or FALLBACK_COLORS)
    fallback = {}
    for method in methods:
        color = declared["color"][method]
        if color is None:
            color = next(free, None)
            if color is None:
                free = iter(FALLBACK_COLORS)
                color = next(free)
        fallback[method] = {"method_name": declared["method_name"][method] or str(method), "color": color,
                            "marker": declared["marker"][method] or FALLBACK_MARKER,
                            "reference": bool(declared["reference"][method]) if declared["reference"][method]
                            is not None else declared_reference(method)}
    for column in DISPLAY_COLUMNS:
        frame[column] = [fallback[method][column] for method in frame["method"]]
    frame["reference"] = frame["reference"].astype(bool)
    return frame


def reference_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of ``frame`` belong to the reference method (``with_display``)."""
    return with_display(frame)["reference"]


def setting_params(setting: str) -> dict:
    """The parameters back from ``canonical_setting`` text ({} for a missing one)."""
    if not isinstance(setting, str) or not setting:
        return {}
    return json.loads(setting)


def shared_prefix(labels: Iterable[str]) -> str:
    """The words every label has before its last word, when each last word is a "name=value"
    setting ("Top-k " for "Top-k k=2" and "Top-k k=8"); "" otherwise."""
    labels = [str(label) for label in labels]
    if not labels or not all(" " in label and "=" in label.rsplit(" ", 1)[1] for label in labels):
        return ""
    heads = {label.rsplit(" ", 1)[0] for label in labels}
    return f"{heads.pop()} " if len(heads) == 1 else ""


def point_label(label: str, name: str = "", labels: Iterable[str] = ()) -> str:
    """A configuration's label without what its method's labels share: the method's display
    ``name`` and a space ("α=0.5" for "SR α=0.5" of "SR"), else the ``shared_prefix`` of the
    method's ``labels`` ("k=2" for "Top-k k=2"), else a letter prefix every label has before
    its number ("120" for "Bo120" among "Bo8", "Bo120"); a label without one is kept whole."""
    labels = [str(other) for other in labels] or [label]
    for prefix in (f"{name} " if name else "", shared_prefix(labels), _letter_prefix(labels)):
        if prefix and label.startswith(prefix) and len(label) > len(prefix):
            return label[len(prefix):]
    return label


def _letter_prefix(labels: Sequence[str]) -> str:
    heads = {re.match(r"[^\W\d]*", label).group() for label in labels}
    if len(heads) != 1:
        return ""
    head = heads.pop()
    return head if head and all(re.fullmatch(re.escape(head) + r"\d+", label) for label in labels) else ""


def natural_key(text: str) -> tuple:
    """Sort key that compares the numbers inside a label as numbers ("First 2 of 3" before
    "First 10 of 12", "SR δ=0.05" before "SR δ=0.1")."""
    parts, position = [], 0
    for match in _NUMBER.finditer(text):
        parts += [(0, text[position:match.start()], 0.0), (1, "", float(match.group()))]
        position = match.end()
    parts.append((0, text[position:], 0.0))
    return tuple(parts)


def configuration_order(reference: bool, method: str, n: float, label: str, setting: str) -> tuple:
    """Where a configuration goes in tables and legends: the reference method first by N, then
    the other methods by name, each method's settings in ``natural_key`` order of their labels
    (then by setting text, so the order never depends on the input's)."""
    if reference:
        return (0, "", float(n) if n is not None and not _is_nan(n) else math.inf, (), setting)
    return (1, str(method), 0.0, natural_key(str(label)), setting)


def distinct_labels(configurations: Sequence[tuple[str, str, str]]) -> list[str]:
    """The labels of (method, setting, label) configurations, made distinct: a label that two
    configurations share (a method whose label names only some of its parameters, swept over
    another) gets " (k=v, ...)" with the parameters that differ among them (and "method=NAME"
    when the methods differ).  Other labels are kept as they are.  Deterministic in the set of
    configurations, so every table built from the same runs names them alike."""
    by_label: dict[str, list[tuple[str, str]]] = {}
    for method, setting, label in configurations:
        key = (str(method), str(setting))
        if key not in by_label.setdefault(label, []):
            by_label[label].append(key)
    out = []
    for method, setting, label in configurations:
        sharing = by_label[label]
        if len(sharing) == 1:
            out.append(label)
            continue
        out.append(f"{label} ({_differences((str(method), str(setting)), sharing)})")
    return out


def _differences(mine: tuple[str, str], sharing: Iterable[tuple[str, str]]) -> str:
    sharing = list(sharing)
    parsed = [({"method": m} | setting_params(s)) for m, s in sharing]
    own = {"method": mine[0]} | setting_params(mine[1])
    keys = sorted({key for params in parsed for key in params})
    differing = [key for key in keys
                 if len({canonical(params[key]) if key in params else "\0unset"
                         for params in parsed}) > 1]
    shown = [f"{key}={_shown(own[key]) if key in own else 'unset'}" for key in differing]
    return ", ".join(shown) or mine[1]


def _shown(value) -> str:
    return value if isinstance(value, str) else canonical(value)


def _present(value) -> bool:
    """A display value the record gives: not None, NaN or "" (a method declared without a colour)."""
    return value is not None and value != "" and not (isinstance(value, float) and math.isnan(value))


def _is_nan(value) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False
