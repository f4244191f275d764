"""The cache of models that specrej prepares itself (the default model, converted .gguf files):
each entry is built once, by one process, however many start at once.

An entry is a directory under `cache_dir()`. Its builder writes into a temporary directory of
its own beside it, flushes it to disk and renames that onto the entry when complete, so an entry
that exists is whole, after a crash too. Builders of one entry take turns through an exclusive
`flock` on `<entry>.lock`: the kernel releases it when its holder dies (killed, out of memory,
node lost), so a stale lock never blocks, and the next holder removes what a dead builder left
half-written. A process that finds another one building waits, says so in one line, and then
uses that entry.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import SpecrejError


def cache_dir() -> Path:
    return Path(os.environ.get("SPECREJ_CACHE", Path.home() / ".cache" / "specrej"))


def is_complete(entry: Path) -> bool:
    """Whether `entry` is a finished model directory (it appears only by an atomic rename)."""
    return (entry / "config.json").is_file()


def build_once(entry: Path, build: Callable[[Path], None], what: str) -> Path:
    """`entry`, built by `build(tmp)` into a fresh directory `tmp` unless it exists already.

    `what` names the model in the messages. Concurrent callers for one entry wait for the one
    building it; if that one dies, the next caller builds it again from scratch.
    """
    if is_complete(entry):
        return entry
    try:
        # writable by its owner alone whatever the umask: the compiled code kept beside the models
        # is refused in a cache others can write (engine/graph_cache.py)
        entry.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        with entry_lock(entry, what):
            if is_complete(entry):  # built by the process we waited for
                return entry
            _remove_leftovers(entry)
            tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=entry.parent))
            try:
                build(tmp)
                if not is_complete(tmp):
                    raise SpecrejError(f"preparing {what} wrote no config.json into {tmp}")
                os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would hide a shared cache from the group
                if entry.exists():  # an entry left incomplete
                    shutil.rmtree(entry)
                _fsync_tree(tmp)  # else a crash soon after the rename could leave the entry's files empty
                os.rename(tmp, entry)
                _fsync(entry.parent)  # the rename itself
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except OSError as error:
        raise SpecrejError(_os_error_message(error, entry, what)) from error
    return entry


def _fsync_tree(root: Path) -> None:
    """Every file and folder under `root`, and `root`, written through to the disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(Path(folder) / name)
        _fsync(Path(folder))


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _os_error_message(error: OSError, entry: Path, what: str) -> str:
    if error.errno == errno.ENOSPC:
        return (f"no space left on the device while preparing {what} in {entry.parent}: free some space, or set "
                f"SPECREJ_CACHE to a folder on a larger disk")
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write the model cache {entry.parent} ({error.strerror}): set SPECREJ_CACHE to a writable folder"
    return f"cannot prepare {what} in {entry.parent}: {error.strerror or error}"


@contextmanager
def entry_lock(entry: Path, what: str) -> Iterator[None]:
    """Hold `<entry>.lock` exclusively; wait (saying so once) while another process holds it.

    The lock file itself stays: removing it while another process waits on it would let a third
    lock a new file of the same name beside them."""
    with open(entry.with_name(entry.name + ".lock"), "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(handle)
            print(f"specrej: waiting for process {holder}, which is preparing {what} in {entry} ...",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_holder(handle, patience_s: float = 1.0) -> str:
    """The pid the lock's holder wrote into the lock file; it writes it just after it takes the
    lock, so a process that arrives at that instant reads again for up to `patience_s`."""
    deadline = time.monotonic() + patience_s
    while True:
        handle.seek(0)
        holder = handle.read().strip()
        if holder or time.monotonic() > deadline:
            return holder or "unknown"
        time.sleep(0.02)


def _remove_leftovers(entry: Path) -> None:
    """The temporary directories of builders that died (only the lock holder builds, so every
    one of them that exists now is dead)."""
    for leftover in entry.parent.glob(f".{entry.name}.tmp-*"):
        print(f"specrej: removing {leftover.name}, left by an interrupted preparation", file=sys.stderr)
        shutil.rmtree(leftover, ignore_errors=True)
    legacy = entry.with_name(entry.name + ".partial")  # the single fixed directory of earlier versions
    if legacy.exists():
        shutil.rmtree(legacy, ignore_errors=True)
