"""Out of memory during a prompt's run, typed: `is_out_of_memory` recognises it (CUDA's, the host
allocator's, Python's), and a `Session` call it stops raises `BatchOutOfMemory` with the session's
first batch, which `prompt_run.run_method` retries with half."""

from __future__ import annotations

import functools

import torch


class BatchOutOfMemory(Exception):
    """Out of memory (CUDA, or the host) during a session: `rows` is the first batch it started
    (None: it failed before any, e.g. in the prefill), `detail` the error in one line."""

    def __init__(self, rows: int | None, detail: str):
        super().__init__(f"out of memory with a batch of {rows}: {detail}")
        self.rows, self.detail = rows, detail


def is_out_of_memory(error: BaseException) -> bool:
    """torch's OutOfMemoryError (CUDA), the host allocator's failure (a RuntimeError from
    DefaultCPUAllocator) or Python's MemoryError."""
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error))


def typed_out_of_memory(step):
    """A `Session` call whose out-of-memory error becomes `BatchOutOfMemory` with the session's first
    batch; raised after the except block, so the failed call's frames (its tensors) are gone."""

    @functools.wraps(step)
    def run_step(self, *args, **kwargs):
        try:
            return step(self, *args, **kwargs)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            text = str(error).splitlines()[0] if str(error) else ""
            failure = BatchOutOfMemory(self.first_batch, f"{type(error).__name__}: {text}")
        raise failure

    return run_step
