"""The clocks of a prompt's run: wall-clock seconds, and the compute the work took, which does not
depend on what else the machine runs. On a CPU the compute is the process's CPU time over the
run (every thread of it: torch's intra-op pool included); on CUDA it is device time, CUDA events
recorded around each timed part. And the CPU threads torch runs on (`set_threads`, `default_threads`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict

import torch

# `timing.compute_clock` of a record: what `timing.compute_s` counts
CPU_CLOCK, CUDA_CLOCK = "process_cpu", "cuda_events"


def clock_kind(device: torch.device) -> str:
    """The compute clock for work on `device`: device time on CUDA, the process's CPU time elsewhere."""
    return CUDA_CLOCK if device.type == "cuda" else CPU_CLOCK


class WorkClock:
    """Wall-clock seconds of named parts of the work (`measure("generate")`), and the compute of
    the run: on a CPU the process's CPU seconds since the clock was made (the parts and the
    book-keeping between them: tokenizing, detokenizing, choosing), on CUDA the device seconds
    within the parts (it waits for the last event)."""

    def __init__(self, device: torch.device):
        self.device, self.kind = device, clock_kind(device)
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu_started = time.process_time()
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def measure(self, part: str):
        if self.kind == CUDA_CLOCK:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(torch.cuda.current_stream(self.device))
        wall = time.perf_counter()
        try:
            yield
        finally:
            self.wall[part] += time.perf_counter() - wall
            if self.kind == CUDA_CLOCK:
                end.record(torch.cuda.current_stream(self.device))
                self.events.append((start, end))

    def wall_s(self, part: str) -> float:
        return self.wall[part]

    def compute_s(self) -> float:
        """The run's compute so far: the process's CPU seconds since the clock was made, or on
        CUDA the device seconds between each part's events."""
        if self.kind != CUDA_CLOCK:
            return time.process_time() - self.cpu_started
        if self.events:
            self.events[-1][1].synchronize()
        return sum(start.elapsed_time(end) for start, end in self.events) / 1000


def default_threads() -> int:
    """Torch's CPU threads when none are asked for: 1. One thread's CPU time is the same beside a
    busy neighbour as alone; with more threads than free cores an OpenMP pool waits on a
    descheduled thread, and its time (wall and CPU) grows several-fold (docs/results.md,
    "Compute that measures the work")."""
    return 1


def set_threads(threads: int | None) -> int:
    """Run torch's CPU work on `threads` threads (None: OMP_NUM_THREADS if set, else
    `default_threads`); returns the count. Call it before the model loads."""
    if threads is None:
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        threads = int(env) if env.isdigit() and int(env) > 0 else default_threads()
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    return threads
