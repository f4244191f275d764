"""`specrej doctor`: whether this install can run specrej, one line per check.

Each check is a small function of a `Context` that returns a `Check` (or None where it does not
apply here, e.g. flash-attn on a CPU). `iter_checks` runs them in order: a check that needs
what an earlier one failed to provide raises `Skipped`, a SpecrejError becomes a FAIL line with
its message, and any other exception a FAIL line with its first line (never a traceback).
`report` prints the lines and gives the exit status. Pass `checks` to run other checks (tests
use it to make one raise).

Nothing here takes long unless asked: an uncached default model is only checked for being
fetchable (`pip index versions`, about a second) unless `Options.fetch`, and the smoke run (a
few seconds on a CPU) needs the model cached.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

from ..errors import SpecrejError
from .doctor_env import (
    FAIL,
    SKIP,
    Check,
    Context,
    Options,
    Skipped,
    check_cpu_bf16,
    check_cuda_bf16,
    check_device,
    check_flash_attn,
    check_memory_budget,
    check_python,
    check_torch,
    check_transformers,
    failed,
    first_line,
)
from .doctor_model import check_model, check_smoke

CheckFunction = Callable[[Context], "Check | None"]

# (name, check): the name is what a FAIL line says when the check raises
CHECKS: tuple[tuple[str, CheckFunction], ...] = (
    ("python", check_python),
    ("torch", check_torch),
    ("transformers", check_transformers),
    ("device", check_device),
    ("cuda-bf16", check_cuda_bf16),
    ("flash-attn", check_flash_attn),
    ("cpu-bf16", check_cpu_bf16),
    ("memory-budget", check_memory_budget),
    ("model", check_model),
    ("smoke", check_smoke),
)


def iter_checks(options: Options = Options(),
                checks: Iterable[tuple[str, CheckFunction]] = CHECKS) -> Iterator[Check]:
    """Each check's result as it finishes (so a slow one does not hold back the lines before it)."""
    ctx = Context(options)
    for name, check in checks:
        try:
            result = check(ctx)
        except Skipped as why:
            result = Check(name, SKIP, str(why))
        except SpecrejError as error:  # already says what is wrong and what to do
            result = Check(name, FAIL, " ".join(str(error).split()))
        except Exception as error:  # not BaseException: Ctrl-C still stops the doctor
            result = failed(name, f"unexpected {type(error).__name__}: {first_line(error)}",
                            "a broken install or a bug: reinstall (pip install -e .), or report this line")
        if result is not None:
            ctx.results[result.name] = result
            yield result


def run_checks(options: Options = Options(), checks: Iterable[tuple[str, CheckFunction]] = CHECKS) -> list[Check]:
    return list(iter_checks(options, checks))


def report(checks: Iterable[Check], out=None) -> int:
    """Print each check's line as it comes; the exit status: 1 if any failed, else 0."""
    out = out or sys.stdout
    status = 0
    for check in checks:
        line = check.line()
        try:
            print(line, file=out, flush=True)
        except UnicodeEncodeError:  # a terminal that is not UTF-8: a '?' rather than a crash
            encoding = getattr(out, "encoding", None) or "ascii"
            print(line.replace("—", "--").encode(encoding, "replace").decode(encoding), file=out, flush=True)
        if check.status == FAIL:
            status = 1
    return status
