"""Where the compiled decode graphs are kept (`compiled.py`): each model architecture's artifacts
under $SPECREJ_CACHE/compiled/<key>, keyed on what the generated code depends on, and inductor's
own cache (its graphs and the attention kernel it builds) under $SPECREJ_CACHE/inductor.

Both hold code this process runs (torch's pickle-based loader, shared objects), so they are used
only where this user alone can change them (`refuse_untrusted`) and are made owner-only; the
weights beside them in $SPECREJ_CACHE are data and may be shared (`models/cache.py`)."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import platform
import pwd
import stat
from pathlib import Path

import torch

from ..errors import SpecrejError
from .linear import PACKED_MAX_ROWS


@contextlib.contextmanager
def inductor_cache():
    """Inductor's cache (`inductor_cache_dir`) for what is compiled or loaded within: refused unless
    this user alone can change it (`refuse_untrusted`), made owner-only, and $TORCHINDUCTOR_CACHE_DIR
    pointed at it for the block only (the process's own value, or none, restored after), so the
    rest of the process, a user's own torch.compile included, keeps its cache. Yields the folder."""
    directory, top, setting = inductor_cache_dir()
    refuse_untrusted(directory, top, setting)
    try:
        make_private_dir(directory, top)
    except OSError as error:
        raise SpecrejError(f"cannot write the compiled-code cache {directory} ({error.strerror}): "
                           f"set {setting} to a writable folder of your own") from error
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    try:
        yield str(directory)
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def inductor_cache_dir() -> tuple[Path, Path, str]:
    """Where inductor keeps its compiled graphs and built kernels, the folder above it that
    `refuse_untrusted` checks from, and the variable that chose it: $TORCHINDUCTOR_CACHE_DIR if the
    user set it, else $SPECREJ_CACHE/inductor, so a study's jobs share one cache (compiled once per
    machine). Torch writes its default (a folder in /tmp) into the variable once anything asks for
    it, and `inductor_cache` sets specrej's within its block, so neither value counts as the user's."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from ..models.cache import cache_dir

    ours = cache_dir() / "inductor"
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) not in (os.path.abspath(default_cache_dir()), os.path.abspath(ours)):
        chosen_dir = Path(os.path.abspath(chosen))
        return chosen_dir, chosen_dir.parent, "TORCHINDUCTOR_CACHE_DIR"
    return ours, cache_dir(), "SPECREJ_CACHE"


def refuse_untrusted(directory: Path, top: Path, setting: str) -> None:
    """Raise SpecrejError unless only this user (or root) can change the code in `directory`:
    each folder from `top` (the folder `setting` names, or the one above it) down to `directory`
    must be this user's or root's and writable by neither their group nor others, or whoever can
    write there would run code in every process that loads it. `top` may be writable by others
    where it is sticky (as /tmp is: no one renames a folder another put there). What is directly
    in `directory` is held to the same rule unless `directory` is owner-only, as `make_private_dir`
    makes it: then no one else reaches inside, whatever the umask gave what torch wrote there.
    Deeper folders are not walked. What does not exist yet is skipped."""
    for path in _folders_from(top, directory):
        _refuse_if_others_can_change(path, setting, sticky_allowed=path == top)
    if directory.is_dir() and directory.stat().st_mode & 0o077:
        for path in sorted(directory.iterdir()):
            _refuse_if_others_can_change(path, setting, sticky_allowed=False)


def make_private_dir(directory: Path, top: Path) -> None:
    """`directory` and the folders between it and `top` made where missing, owner-only (0700), and
    `top` itself, if missing, writable by its owner alone whatever the umask (0755 at most)."""
    top.mkdir(mode=0o755, parents=True, exist_ok=True)
    for path in _folders_from(top, directory)[1:]:
        path.mkdir(mode=0o700, exist_ok=True)


def _folders_from(top: Path, directory: Path) -> list[Path]:
    """`top`, then each folder below it down to `directory` (a folder inside `top`)."""
    depth = len(directory.relative_to(top).parts)
    return [top, *reversed(directory.parents[:depth - 1]), directory]


def _refuse_if_others_can_change(path: Path, setting: str, sticky_allowed: bool) -> None:
    try:
        status = path.stat()
    except FileNotFoundError:
        return
    writable_by = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if status.st_mode & bit]
    if sticky_allowed and status.st_mode & stat.S_ISVTX:
        writable_by = []
    if status.st_uid not in (os.getuid(), 0):
        problem, fix = f"it belongs to {_user_name(status.st_uid)}", f"set {setting} to a folder of your own"
    elif writable_by:
        problem = f"it is writable by {' and '.join(writable_by)}"
        fix = f"run `chmod -R go-w {path}`, or set {setting} to a folder of your own"
    else:
        return
    raise SpecrejError(f"refusing to load compiled code from {path}: {problem}, and whoever can write there "
                       f"runs code in this process; {fix}")


def _user_name(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"user id {uid}"


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


def measurement_path(artifacts: Path, threads: int) -> Path:
    """Where the eager-against-compiled measurement of a machine's graphs at `threads` torch threads
    is kept, beside the graphs (`graph_build.build_and_measure` writes it)."""
    return artifacts / f"measured-{threads}-threads.json"


def write_measurement(artifacts: Path, measurement: dict) -> Path:
    """`measurement` kept beside the graphs, its ranges added to those measured before at the same
    threads (a study builds its row ranges in separate jobs, side by side): read, merged and
    replaced under the measurement's lock."""
    from ..models.cache import entry_lock

    path = measurement_path(artifacts, measurement["threads"])
    artifacts.mkdir(parents=True, exist_ok=True)
    with entry_lock(path, "the compiled graphs' measurement"):
        kept = read_measurement(artifacts, measurement["threads"]) or {}
        return write_json(path, {**measurement, "ranges": {**kept.get("ranges", {}), **measurement["ranges"]}})


def write_json(path: Path, data: dict) -> Path:
    """`data` as JSON at `path`, replaced in one rename (a reader sees the old file or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


def read_measurement(artifacts: Path, threads: int) -> dict | None:
    """The measurement kept beside the graphs at `threads` threads; None where there is none (or
    one that cannot be read)."""
    try:
        return json.loads(measurement_path(artifacts, threads).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
