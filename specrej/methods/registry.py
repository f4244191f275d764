"""The methods `specrej generate --method NAME` runs: the built-in ones by name, and any
`Method` from outside the project as ``python:module:attribute`` (the module on PYTHONPATH),
the way rewards are loaded."""

from __future__ import annotations

import hashlib
import importlib
import sys
from importlib import metadata
from pathlib import Path

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
_NOT_METHODS = {"base", "out_of_memory", "registry", "session", "prompt_run", "surface"}


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


def method_code(method: Method) -> str:
    """What identifies the code behind `method`, for a run file's settings check: `package_code()`
    for a method whose functions (run, label, requires) all come from the package, else
    `sources_code` of the files of the modules outside it that define them (for
    python:module:attribute, normally that one module): a rerun after that code changed is refused."""
    functions = [f for f in (method.run, method.label, method.requires) if f is not None]
    modules = sorted({getattr(f, "__module__", None) or "?" for f in functions})
    package = __name__.split(".")[0]
    outside = [name for name in modules if name != package and not name.startswith(f"{package}.")]
    if not outside:
        return package_code()
    return sources_code([getattr(sys.modules.get(name), "__file__", None) for name in outside])


def package_code() -> str:
    """A built-in method's code: "specrej VERSION"."""
    return f"specrej {_package_version()}"


def sources_code(paths: list[str | None]) -> str:
    """"sha256:..." of the content of the source files `paths`, in order (a path that is no file
    counts as "?": such code is not tracked). The workflow's method_run jobs take the same value
    as a param (`workflow/job_options.method_code`), so an edit reruns them."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes() if path and Path(path).is_file() else b"?")
    return "sha256:" + digest.hexdigest()


def _package_version() -> str:
    try:
        return metadata.version("specrej")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        from .. import __version__

        return __version__
