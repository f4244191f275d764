"""What a decoding method declares: its name, its parameters (type, default, range) and a label;
its `run` over the engine for one prompt returns the `algorithms.Result` every method returns.

    run(engine, reward, prompt, *, sampling, seed, memory_budget, measure_memory, **params) -> Result

`params` are the method's own, checked against its declaration (`Method.resolve`) before any
model loads, so a bad value fails with one message naming the method and the parameter.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecrejError

TYPES = ("int", "float", "str", "bool", "ints", "path")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


@dataclass(frozen=True)
class Param:
    """One parameter of a method. `type` is one of TYPES ("ints": a list of integers; "path": a
    file, which the settings digest reads by content). `low`/`high` bound numbers (and every
    item of "ints"), inclusive unless `low_open`/`high_open`; `choices` lists the allowed
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
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        if self.high is None and not self.low_open:
            return f">= {low}"
        return f"in {left}{low}, {high}{right}"

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
            raise SpecrejError(f"{self.option} must be {kind}, got {_shown(text)}") from None
        return text

    def check(self, value, method: str):
        """`value` as the parameter's type, or a SpecrejError naming the option (and, for a missing
        one, the method)."""
        where = ""
        if value is None:
            if self.required:
                raise SpecrejError(f"{self.option} is required for {method}" + (f" ({self.help})" if self.help else ""))
            return None
        if self.type == "ints":
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise SpecrejError(f"{self.option} must be a list of integers{where}, got {_shown(value)}")
            return [self._number(item, where, integral=True) for item in value]
        if self.type in ("int", "float"):
            return self._number(value, where, integral=self.type == "int")
        if self.type == "bool":
            if not isinstance(value, bool):
                raise SpecrejError(f"{self.option} must be true or false{where}, got {_shown(value)}")
            return value
        if not isinstance(value, (str, Path)):
            raise SpecrejError(f"{self.option} must be a string{where}, got {_shown(value)}")
        value = str(value)
        if self.choices and value not in self.choices:
            raise SpecrejError(f"{self.option} must be {self.range_text()}{where}, got {_shown(value)}")
        if self.type == "path" and not Path(value).is_file():
            raise SpecrejError(f"{self.option}: file not found: {value}")
        return value

    def _number(self, value, where: str, *, integral: bool):
        kind = "an integer" if integral else "a number"
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
                integral and not isinstance(value, numbers.Integral)):
            bounds = f" {self.range_text()}" if self.range_text() else ""
            raise SpecrejError(f"{self.option} must be {kind}{bounds}, got {_shown(value)}")
        if not math.isfinite(value) or (self.low is not None and (value < self.low or (self.low_open and value == self.low))) \
                or (self.high is not None and (value > self.high or (self.high_open and value == self.high))):
            raise SpecrejError(f"{self.option} must be {self.range_text() or 'finite'}{where}, got {_shown(value)}")
        return int(value) if integral else float(value)

    def describe(self) -> dict:
        """The declaration as plain data (for the workflow's config checks and the docs)."""
        return {key: value for key, value in (
            ("name", self.name), ("type", self.type), ("default", self.default), ("required", self.required),
            ("range", self.range_text()), ("help", self.help)) if value not in ("", None) or key == "default"}


@dataclass(frozen=True)
class Method:
    """A decoding method behind one interface (see the module docstring).

    `label(params)` names a setting in tables and legends ("SR α=0.5"). `batch_param` names the
    parameter that holds the batch size: on out-of-memory the prompt is retried with half the
    batch that failed there. `record_method` is the record's top-level `method` (default: the
    name); the methods of one family may share it, as the SR cut rules share "sr". `load`
    turns checked parameters into `run`'s keyword arguments once per run file (e.g. reads a
    fit file); by default they go as they are.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    run: Callable
    label: Callable[[Mapping], str]
    batch_param: str | None = None
    record_method: str | None = None
    load: Callable[[Mapping], dict] | None = None
    setting_keys: tuple[str, ...] = field(default=())

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

    def resolve(self, given: Mapping) -> dict:
        """Every declared parameter, given or default, checked; an unknown one is refused."""
        unknown = [name for name in given if name not in {p.name for p in self.params}]
        if unknown:
            raise self._unknown(unknown[0])
        return {p.name: p.check(given.get(p.name, p.default), self.description) for p in self.params}

    def kwargs(self, params: Mapping) -> dict:
        return dict(self.load(params)) if self.load else dict(params)

    def setting_name(self, params: Mapping) -> str:
        """A file-name form of the setting (workflow run files): the `setting_keys` values, e.g.
        alpha0.5; a digest of the parameters when the method names none."""
        if self.setting_keys:
            return "-".join(f"{key}{_file_value(params[key])}" for key in self.setting_keys)
        return "p" + settings_digest(params)[:10]


def _file_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def canonical(value) -> str:
    """One JSON text per value (sorted keys, no spaces): the configuration key of a setting."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def settings_digest(settings: Mapping) -> str:
    return hashlib.sha256(canonical(settings).encode()).hexdigest()


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()
