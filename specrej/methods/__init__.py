"""Decoding methods behind one interface: each module holds one method's algorithm and its
declaration (`base.Method`), and runs a prompt through the surface of `surface.py`
(`MethodSession`, `Batch`, `Candidate`, `Round`), which `session.Session` implements. Built in:
the method of every module here that declares one (it registers itself at import; `built_in()`
lists them by name); any method from outside the project as python:module:attribute. Torch-free at
import (the workflow reads declarations)."""

from .base import Display, Method, Param, Params, canonical, file_digest, settings_digest
from .registry import built_in, get_method, register
from .surface import Batch, Candidate, MethodSession, Round

__all__ = ["Batch", "Candidate", "Display", "Method", "MethodSession", "Param", "Params", "Round", "built_in",
           "canonical", "file_digest", "get_method", "register", "settings_digest"]
