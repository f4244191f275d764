"""What a decoding method declares: its name, its parameters (type, default, range), how its
settings are named and shown, and its `run`, which holds the algorithm for one prompt:

    run(session: MethodSession, params: Params) -> dict   # the method's own record params

`Method.check` turns given values (CLI, API or config alike) into the one typed `Params` value,
before any model loads, so a bad value fails with one message naming the option. The `Session`
(methods/session.py) does the book-keeping; torch-free here, so the workflow can read declarations.
What a method may use is the versioned surface of docs/methods.md ("The method surface").
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SpecrejError, shown

if TYPE_CHECKING:
    from .surface import MethodSession

TYPES = ("int", "float", "str", "bool", "ints", "path")
# the most rows (responses, a batch) a method's count parameter may ask for: its declared `high`
MAX_ROWS = 2**20
# what a method's name (and `record_method`) may be: it names the workflow's output folders and files
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Param:
    """One parameter of a method. `type` is one of TYPES ("ints": a list of integers; "path": a
    file, which the settings digest reads by content). `low`/`high` bound numbers (and every
    item of "ints"), inclusive unless `low_open`/`high_open` (an integer out of range is told the
    bound it broke, ">= 1" or "<= 1048576"; a number, the whole range); `choices` lists the allowed
    strings. `default` None with `required` False means "not set" (the method decides).
    `flag` is how a message names it: the CLI option that sets it (default --param NAME)."""

    name: str
    type: str
    default: object = None
    required: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    help: str = ""
    flag: str | None = None
    read: Callable[[str], object] | None = None  # "path": what the run needs from the file, read once by `check`

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: type must be one of {TYPES}, got {self.type!r}")

    @property
    def option(self) -> str:
        return self.flag or f"--param {self.name}"

    def range_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.low is None and self.high is None:
            return ""
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        low = "-inf" if self.low is None else _bound(self.low)
        high = "inf" if self.high is None else _bound(self.high)
        if self.high is None and not self.low_open:
            return f">= {low}"
        return f"in {left}{low}, {high}{right}"

    def _side(self, upper: bool) -> str:
        """One bound as a message names it: ">= 1", "<= 1048576" ("<", ">" when it is open)."""
        if upper:
            return f"{'<' if self.high_open else '<='} {_bound(self.high)}"
        return f"{'>' if self.low_open else '>='} {_bound(self.low)}"

    def parse(self, text: str):
        """A value from command-line text (--param NAME=TEXT), checked by `check` afterwards."""
        try:
            if self.type == "int":
                return int(text)
            if self.type == "float":
                return float(text)
            if self.type == "bool":
                if text.lower() in ("1", "true", "yes"):
                    return True
                if text.lower() in ("0", "false", "no"):
                    return False
                raise ValueError(text)
            if self.type == "ints":
                items = [item.strip() for item in text.split(",")]
                return [] if not any(items) else [int(item) for item in items]
        except ValueError:
            kind = {"int": "an integer", "float": "a number", "bool": "true or false",
                    "ints": "comma-separated integers such as 8,16,32"}[self.type]
            raise SpecrejError(f"{self.option} must be {kind}, got {shown(text)}") from None
        return text

    def check(self, value, method: str, option: str | None = None):
        """`value` as the parameter's type, or a SpecrejError naming the option (and, for a missing
        one, the method). `option`: how the message names the parameter where it came from
        elsewhere than the CLI (a config key such as ``methods[2].grid.k``); default `self.option`."""
        if option is not None:
            return replace(self, flag=option).check(value, method)
        if value is None:
            if self.required:
                raise SpecrejError(f"{self.option} is required for {method}" + (f" ({self.help})" if self.help else ""))
            return None
        if self.type == "ints":
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise SpecrejError(f"{self.option} must be a list of integers, got {shown(value)}")
            return [self._number(item, integral=True) for item in value]
        if self.type in ("int", "float"):
            return self._number(value, integral=self.type == "int")
        if self.type == "bool":
            if not isinstance(value, bool):
                raise SpecrejError(f"{self.option} must be true or false, got {shown(value)}")
            return value
        if not isinstance(value, (str, Path)):
            raise SpecrejError(f"{self.option} must be a string, got {shown(value)}")
        value = str(value)
        if self.choices and value not in self.choices:
            raise SpecrejError(f"{self.option} must be {self.range_text()}, got {shown(value)}")
        if self.type == "path" and not Path(value).is_file():
            raise SpecrejError(f"{self.option}: file not found: {value}")
        return value

    def _number(self, value, *, integral: bool):
        kind = "an integer" if integral else "a number"
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
                integral and not isinstance(value, numbers.Integral)):
            bounds = self._side(upper=False) if integral and self.low is not None else self.range_text()
            raise SpecrejError(f"{self.option} must be {kind}{' ' if bounds else ''}{bounds}, got {shown(value)}")
        above = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        if not math.isfinite(value) or above or (
                self.low is not None and (value < self.low or (self.low_open and value == self.low))):
            bound = self._side(upper=above) if integral else self.range_text() or "finite"
            raise SpecrejError(f"{self.option} must be {bound}, got {shown(value)}")
        return int(value) if integral else float(value)

    def describe(self) -> dict:
        """The declaration as plain data (for the workflow's config checks and the docs)."""
        return {key: value for key, value in (
            ("name", self.name), ("type", self.type), ("default", self.default), ("required", self.required),
            ("range", self.range_text()), ("help", self.help)) if value not in ("", None) or key == "default"}


class Params(Mapping):
    """A method's checked parameters: `params.alpha` or `params["alpha"]`, JSON-ready values (what
    the record holds); `params.loaded[name]`: what a file parameter's `read` made of its file."""

    def __init__(self, values: Mapping, loaded: Mapping | None = None):
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "loaded", dict(loaded or {}))

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no parameter {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("Params are read-only: use replace()")

    def replace(self, **changes) -> Params:
        return Params({**self._values, **changes}, self.loaded)

    def __repr__(self) -> str:
        return f"Params({self._values!r})"


@dataclass(frozen=True)
class Display:
    """How a method's settings are shown in tables and figures: the family's display name, its
    colour and marker, and whether it is the reference every other method is measured against
    (Best-of-N). Written into each record (params.display), so analysis needs no registry."""

    name: str
    color: str
    marker: str = "o"
    reference: bool = False


@dataclass(frozen=True)
class Method:
    """A decoding method behind one interface (see the module docstring).

    `name` (and `record_method`) name the workflow's output folders, so each is lowercase letters,
    digits, "-" and "_" (`NAME`); another is refused where the method is declared.
    `run(session, params) -> dict`: the algorithm on one prompt (`surface.MethodSession`, the
    checked `Params`); the dict it returns (JSON values: the setting as it ran) starts the record's params.
    `label(params)` names a setting in tables and legends ("SR α=0.5"). `batch_param` names the
    parameter that holds the batch size: on out-of-memory the prompt is retried with half the
    batch that failed there. `record_method` is the record's top-level `method` (default: the
    name); the methods of one family may share it, as the SR cut rules share "sr".
    `setting_keys` name a setting in file names (workflow run files); `step_seconds` is the
    workflow's time estimate per prompt and decode step at the study's sizes. `requires` checks
    what the parameters must satisfy together (e.g. n_init <= n), with the others, before any model
    loads: `requires(values) -> str | None` gets every parameter's checked value by name (None: not
    set) and returns None when they fit together, else the one-line message the user sees.
    `selection` is the rule that picks a prompt's answer among the completed responses
    (`records.answers.SELECT_RULES`) unless the run names another (`--selection`): "reward" (eq. 6)
    for the methods that maximise a reward, "vote" for one whose answer is the majority's.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    run: Callable[[MethodSession, Params], dict]
    label: Callable[[Mapping], str]
    display: Display | None = None
    batch_param: str | None = None
    record_method: str | None = None
    setting_keys: tuple[str, ...] = field(default=())
    step_seconds: float | None = None
    # what the parameters must satisfy together: a message when they do not (None: they do)
    requires: Callable[[Mapping], str | None] | None = None
    selection: str = "reward"

    def __post_init__(self):
        for key, value in (("name", self.name), ("record_method", self.record_method)):
            if (value is not None or key == "name") and not (isinstance(value, str) and NAME.fullmatch(value)):
                raise SpecrejError(f"a method's {key} must be lowercase letters, digits, '-' and '_' (at most 64, "
                                   f"starting with a letter or digit: it names output folders), got {shown(value)}")

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise self._unknown(name)

    def _unknown(self, name: str) -> SpecrejError:
        return SpecrejError(f"{self.name} ({self.description}) takes no parameter {name!r} "
                            f"(its parameters: {self.param_names()})")

    def param_names(self) -> str:
        return ", ".join(p.name for p in self.params) or "none"

    def check(self, given: Mapping, option: Callable[[str], str] | None = None) -> Params:
        """The one check: every declared parameter, given (None: not given) or default, checked
        against its declaration, and each file parameter's file read once; an unknown one is refused.
        `option(name)`: how a message names a parameter given elsewhere than on the command line
        (the workflow: ``methods[2].grid.k``); a relation between parameters that fails is then
        prefixed with ``option("")`` stripped of its trailing dot."""
        if isinstance(given, Params):
            return given
        given = {k: (list(v) if isinstance(v, Iterator) else v) for k, v in given.items() if v is not None}
        unknown = [name for name in given if name not in {p.name for p in self.params}]
        if unknown:
            raise self._unknown(unknown[0])
        values = {p.name: p.check(given.get(p.name, p.default), self.description, option(p.name) if option else None)
                  for p in self.params}
        problem = self.requires(values) if self.requires else None
        if problem:
            raise SpecrejError(f"{option('').rstrip('.')}: {problem}" if option else problem)
        loaded = {p.name: p.read(values[p.name]) for p in self.params if p.read and values[p.name] is not None}
        return Params(values, loaded)

    def display_record(self) -> dict:
        """params.display of this method's records."""
        display = self.display or Display(name=self.name, color="")
        return {"name": display.name, "color": display.color, "marker": display.marker,
                "reference": display.reference}

    def setting_name(self, params: Mapping) -> str:
        """A file-name form of the setting (workflow run files): each of `setting_keys` followed by
        its value, e.g. alpha0.5 or n16-t1_8 (`_file_key`), joined by "-"; a digest of the
        parameters when the method names none."""
        if self.setting_keys:
            return "-".join(_file_key(key) + _file_value(params[key]) for key in self.setting_keys)
        return "p" + settings_digest(dict(params))[:10]


def _bound(value: float) -> str:
    """A bound as a message shows it: 1048576, not 1.04858e+06; 0.5."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else f"{value:g}"


def _file_key(key: str) -> str:
    """A key as it starts a setting's file name: itself (alpha0.5), or with "_" after a key
    that ends in a digit, whose value would otherwise run into it (t1_8, not t18)."""
    return f"{key}_" if key[-1:].isdigit() else key


def _file_value(value) -> str:
    """A value as a setting's file name holds it: a float as short as it reads back exactly (0.5,
    not 0.500000; 0.1234567, which six digits would merge with 0.1234568)."""
    if not isinstance(value, float):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def canonical(value) -> str:
    """One JSON text per value (sorted keys, no spaces): the configuration key of a setting."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def settings_digest(settings: Mapping) -> str:
    return hashlib.sha256(canonical(settings).encode()).hexdigest()


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()
