"""The configuration key of the analysis: a record's *setting*, and how settings are named,
ordered and told apart.  Standard library only (``analysis.io`` and ``analysis.metrics`` both use it).

The engine writes into every record's ``params["setting"]`` the method that ran and its
resolved parameters, ``{"method": NAME, "params": {...}, "label": "SR α=0.5"}``
(``specrej.api.run_prompts``).  The analysis groups records by (method, setting), where
``setting`` is the canonical JSON text of those parameters (``canonical_setting``), and names
each configuration by its ``label``.  It never reads a method's parameters itself, except
Best-of-N's ``n``: the Best-of-N ladder is the reference curve (eq. 7-8 normalise by
Bo-N_min, the BoN-equivalent compute is read off the Best-of-N curve), so a BoN setting is
always ``{"n": <total N>}`` and labelled ``Bo<N>`` (``analysis.io.record_setting``).

A study of one method (``analysis.adaptive_study``, SR's §6 study) may read that method's own
parameters back with ``setting_params``.
"""

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence

BON = "bon"
# Display names of the paper's methods and the control (legends, headline sentences) and the
# prefix their labels share, which a Figure 3 point annotation drops ("SR α=0.5" is drawn
# "α=0.5" on the SR series).  Any other method is named by what its labels share before their
# last "name=value" word (``shared_prefix``: "ST-BoN" for "ST-BoN N=32"), else by its name.
METHOD_NAMES = {"bon": "Best-of-N", "sr": "SR", "sr-adaptive": "SR adaptive", "sr-random": "Random SR"}
LABEL_PREFIXES = {"bon": "Bo", "sr": "SR ", "sr-adaptive": "SR ", "sr-random": "Random SR "}
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def canonical_setting(params: Mapping) -> str:
    """The configuration key of a setting's parameters: their JSON text, keys sorted, no spaces,
    so equal settings give equal text whatever order the record wrote them in."""
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def setting_params(setting: str) -> dict:
    """The parameters back from ``canonical_setting`` text ({} for a missing one)."""
    if not isinstance(setting, str) or not setting:
        return {}
    return json.loads(setting)


def shared_prefix(labels: Iterable[str]) -> str:
    """The words every label has before its last word, when each last word is a "name=value"
    setting ("ST-BoN " for "ST-BoN N=32" and "ST-BoN N=128"); "" otherwise."""
    labels = [str(label) for label in labels]
    if not labels or not all(" " in label and "=" in label.rsplit(" ", 1)[1] for label in labels):
        return ""
    heads = {label.rsplit(" ", 1)[0] for label in labels}
    return f"{heads.pop()} " if len(heads) == 1 else ""


def method_name(method: str, labels: Iterable[str] = ()) -> str:
    """The display name of a method: ``METHOD_NAMES`` for the built-ins, else its labels'
    ``shared_prefix``, else the name itself."""
    return METHOD_NAMES.get(method) or shared_prefix(labels).strip() or str(method)


def point_label(method: str, label: str, labels: Iterable[str] = ()) -> str:
    """A configuration's label without its method's shared prefix (``LABEL_PREFIXES``, else the
    ``shared_prefix`` of its method's `labels`): "α=0.5" for "SR α=0.5", "120" for "Bo120",
    "N=32" for "ST-BoN N=32"; a label without one is kept whole."""
    prefix = LABEL_PREFIXES.get(method) or shared_prefix(labels)
    return label[len(prefix):] if prefix and label.startswith(prefix) and len(label) > len(prefix) else label


def natural_key(text: str) -> tuple:
    """Sort key that compares the numbers inside a label as numbers ("First 2 of 3" before
    "First 10 of 12", "SR δ=0.05" before "SR δ=0.1")."""
    parts, position = [], 0
    for match in _NUMBER.finditer(text):
        parts += [(0, text[position:match.start()], 0.0), (1, "", float(match.group()))]
        position = match.end()
    parts.append((0, text[position:], 0.0))
    return tuple(parts)


def configuration_order(method: str, n: float, label: str, setting: str) -> tuple:
    """Where a configuration goes in tables and legends: Best-of-N first by N, then the other
    methods by name, each method's settings in ``natural_key`` order of their labels (then by
    setting text, so the order never depends on the input's)."""
    if method == BON:
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
                 if len({json.dumps(params[key], sort_keys=True) if key in params else "\0unset"
                         for params in parsed}) > 1]
    shown = [f"{key}={_shown(own[key]) if key in own else 'unset'}" for key in differing]
    return ", ".join(shown) or mine[1]


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _is_nan(value) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False
