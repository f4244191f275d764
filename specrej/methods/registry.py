"""The methods `specrej generate --method NAME` runs: the built-in ones by name, and any
`Method` from outside the project as ``python:module:attribute`` (the module on PYTHONPATH),
the way rewards are loaded."""

from __future__ import annotations

import importlib

from ..errors import SpecrejError
from .base import Method

_BUILT_IN: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add a built-in method (its module calls this at import)."""
    if method.name in _BUILT_IN:
        raise ValueError(f"a method named {method.name!r} is registered already")
    _BUILT_IN[method.name] = method
    return method


# the package's modules that declare no method
_NOT_METHODS = {"base", "registry", "session"}


def built_in() -> dict[str, Method]:
    """Every method of the package's modules (each registers its own at import: adding a method
    is adding its module)."""
    import pkgutil

    from .. import methods

    for module in pkgutil.iter_modules(methods.__path__):
        if module.name not in _NOT_METHODS and not module.name.startswith("_"):
            importlib.import_module(f"{methods.__name__}.{module.name}")
    return dict(sorted(_BUILT_IN.items()))


def get_method(spec: str) -> Method:
    """The method named `spec`, or the `Method` object at python:module:attribute."""
    if spec.startswith("python:"):
        module_name, _, attribute = spec.removeprefix("python:").partition(":")
        if not module_name or not attribute:
            raise SpecrejError(f"method {spec!r}: expected python:module:attribute")
        try:
            method = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise SpecrejError(f"method {spec!r}: cannot import {attribute!r} from {module_name!r} ({error})") from error
        if not isinstance(method, Method):
            raise SpecrejError(f"method {spec!r} is a {type(method).__name__}, not a specrej.methods.Method")
        return method
    methods = built_in()
    if spec not in methods:
        raise SpecrejError(f"unknown method {spec!r}; choose {', '.join(methods)} or python:module:attribute")
    return methods[spec]
