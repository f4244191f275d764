"""Decoding methods behind one interface (`base.Method`): Best-of-N, Speculative Rejection with
the alpha cut (`sr`) and the adaptive cut (`sr-adaptive`), the random-halting control
(`sr-random`), and any method from outside the project as python:module:attribute."""

from .base import Method, Param, canonical, file_digest, settings_digest
from .registry import built_in, get_method, register

__all__ = ["Method", "Param", "built_in", "canonical", "file_digest", "get_method", "register", "settings_digest"]
