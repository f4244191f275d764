"""Which judge decides a Table 1 comparison: the judge names, how ``auto`` resolves, and the
deterministic offline judge.

    judge="gpt4_turbo"     alpaca_eval's ``weighted_alpaca_eval_gpt4_turbo`` (the paper's judge);
                           needs ``OPENAI_API_KEY`` (or ``OPENAI_API_KEYS`` / ``OPENAI_CLIENT_CONFIG_PATH``)
    judge="local:<model>"  a local instruct model through ``specrej.models.loading`` (``local`` =
                           ``local:default``, SmolLM2-135M-Instruct); ``analysis/judges/local_pairwise``
    judge="longest"        deterministic: the longer output wins, equal lengths draw (tests)
    judge=<callable>       ``f(instruction, output_a, output_b) -> 1 | 2 | 1.5 | p in [1, 2] | None``
                           (1: the first shown is better; None: no verdict), deterministic tests
    judge="auto"           ``local:default``: the paid judge runs only when it is named, never
                           because an OpenAI key happens to be set

Standard library only: the workflow asks ``judge_availability`` when it plans its jobs, so that a
Table 1 that was "not evaluated" is judged again once what it lacked is there.  Whether a
resolved judge can actually run here (alpaca_eval installed, the local model loads) is
``analysis.alpaca_eval_adapter.usable_judge``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

AUTO = "auto"
API_JUDGE = "gpt4_turbo"
LOCAL_PREFIX = "local:"
DEFAULT_LOCAL_JUDGE = "local:default"
OFFLINE_JUDGE = "longest"
KEY_VARIABLES = ("OPENAI_API_KEY", "OPENAI_API_KEYS", "OPENAI_CLIENT_CONFIG_PATH")

PairJudge = Callable[[str, str, str], "float | None"]


class JudgeUnavailable(RuntimeError):
    """The requested judge cannot run here (no alpaca_eval, no API key, no loadable local model)."""


def longest_judge(instruction: str, output_a: str, output_b: str) -> float:
    """The deterministic offline judge: the longer output (in characters, stripped) wins; a draw
    when the lengths are equal.  Returns 1 (first shown), 2 (second shown) or 1.5."""
    a, b = len(output_a.strip()), len(output_b.strip())
    return 1.0 if a > b else 2.0 if b > a else 1.5


def api_key_present() -> bool:
    """Whether alpaca_eval's OpenAI client has credentials: one of ``KEY_VARIABLES`` is set."""
    return any(os.environ.get(name) for name in KEY_VARIABLES)


def judge_availability(judge: str | None) -> str:
    """What the configured ``judge`` needs here and may lack today, in one line (alpaca_eval
    installed; the OpenAI key, for ``gpt4_turbo``): the win-rate job's parameter, so that it runs
    again once this changes, rather than keeping a "not evaluated" table."""
    if judge is None:
        return "no judge"
    needs = [f"alpaca_eval {'installed' if importlib.util.find_spec('alpaca_eval') else 'missing'}"]
    if judge == API_JUDGE:
        needs.append(f"OpenAI key {'set' if api_key_present() else 'not set'}")
    return ", ".join(needs)


def resolve_judge(judge: str | PairJudge | None = AUTO) -> str | PairJudge:
    """The concrete judge for ``judge`` (``auto`` and ``local`` are ``local:default``); raises
    ``JudgeUnavailable`` for ``gpt4_turbo`` without a key or for ``None`` (no judge configured),
    and ``ValueError`` for an unknown name."""
    if judge is None:
        raise JudgeUnavailable("no judge configured")
    if callable(judge):
        return judge
    if judge == AUTO:
        return DEFAULT_LOCAL_JUDGE
    if judge == API_JUDGE:
        if not api_key_present():
            raise JudgeUnavailable(
                "judge 'gpt4_turbo' needs an OpenAI API key: set OPENAI_API_KEY (or OPENAI_API_KEYS / "
                "OPENAI_CLIENT_CONFIG_PATH, as alpaca_eval reads them), or use judge 'auto' or 'local:<model>'"
            )
        return judge
    if judge == "local":
        return DEFAULT_LOCAL_JUDGE
    if judge == OFFLINE_JUDGE or (judge.startswith(LOCAL_PREFIX) and len(judge) > len(LOCAL_PREFIX)):
        return judge
    raise ValueError(f"unknown judge {judge!r}; choose 'auto', 'gpt4_turbo', 'local:<model>', 'longest' or a callable")


def judge_name(judge: str | PairJudge) -> str:
    """How the tables and annotations name a resolved judge: its name, or ``python:<function>``."""
    return judge if isinstance(judge, str) else f"python:{getattr(judge, '__name__', type(judge).__name__)}"
