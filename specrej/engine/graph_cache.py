"""Where the compiled decode graphs are kept (`compiled.py`): each model architecture's artifacts
under $SPECREJ_CACHE/compiled/<key>, keyed on what the generated code depends on, and inductor's
own cache under $SPECREJ_CACHE/inductor."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from .linear import PACKED_MAX_ROWS


def inductor_cache_dir() -> str:
    """Where inductor keeps its compiled graphs: $TORCHINDUCTOR_CACHE_DIR if the user set it, else
    $SPECREJ_CACHE/inductor, so a study's jobs share one cache (compiled once per machine). Torch
    writes its default (a folder in /tmp) into the variable once anything asks for it, so that
    value counts as unset."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from ..models.cache import cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != os.path.abspath(default_cache_dir()):
        return chosen
    return str(cache_dir() / "inductor")


def artifact_dir(forward) -> Path:
    """$SPECREJ_CACHE/compiled/<key>: the compiled steps of models with `forward`'s architecture
    (not its weights, which each call passes), keyed by what the generated code depends on: the
    model's config, dtype and weight layout, the engine's code (`code_digest`), torch and the machine."""
    from ..models.cache import cache_dir

    config = {k: v for k, v in forward.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    device = forward.device
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda"
               else f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}")
    import transformers  # its embedding modules are traced into the step

    key = hashlib.sha256()
    for part in (torch.__version__, transformers.__version__, machine, str(forward.dtype), type(forward).__name__,
                 PACKED_MAX_ROWS, json.dumps(config, sort_keys=True, default=str),
                 [type(w).__name__ for w in forward.eager_run.weights[0]]):
        key.update(repr(part).encode())
    key.update(code_digest(sorted(Path(__file__).parent.glob("*.py"))).encode())
    return cache_dir() / "compiled" / key.hexdigest()[:16]


def code_digest(paths: list[Path]) -> str:
    """A digest of the code of the Python files `paths`, not of their docstrings, comments or layout:
    an edit of the engine's text alone keeps the compiled graphs."""
    digest = hashlib.sha256()
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        digest.update(ast.dump(tree).encode())
    return digest.hexdigest()
