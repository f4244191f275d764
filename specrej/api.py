"""The Python API behind `specrej generate`: load once, run a prompt file, append records.

A run, from the CLI or from `run_prompts`, goes one way: `plan.plan_run` checks every setting once
(`check_run`) and computes the output settings once (`output_settings`); the prompts are read
(`records.prompts`); a `records.io.RecordWriter` opens
the output once (its lock, a torn tail repaired, the finished records read and a resume with
other settings refused), before any model loads; `run_planned` then settles the loaded engine's
dtype and device with the writer and only loops over the prompts left, `prompt_record` building
each record (its params: `session.record_params`).
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from .engine.engine import Engine
from .engine.load import check_prompt_format, load_engine
from .engine.sampling import SamplingParams
from .errors import SpecrejError
from .methods import Method, Params, settings_digest
from .methods.prompt_run import flop_shapes, run_method
from .methods.session import Result, record_params
from .plan import (ENGINE_SETTINGS, MAX_MEMORY_BUDGET, RunPlan, check_run, engine_settings, output_settings,
                   plan_run)
from .records.answers import answered_candidates, check_reference, reference_digest, select
from .records.io import RecordWriter
from .records.prompts import PromptItem, read_prompts
from .rewards.reward import Response, Reward

# the public API beside what this module defines: each name is defined once, where its step is
__all__ = ["ENGINE_SETTINGS", "MAX_MEMORY_BUDGET", "RunPlan", "check_prompt_format", "check_run", "engine_settings",
           "load_engine", "output_settings", "plan_run", "read_prompts", "FAIL_FAST_PROMPTS", "NO_COMPLETE_RESPONSE",
           "best_of_n", "one_line", "prompt_record", "prompt_seed", "run_one", "run_planned", "run_prompts",
           "speculative_rejection"]


def prompt_seed(seed: int, prompt_id) -> int:
    """A seed per prompt, stable under resume and reordering, and distinct across prompts."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()[:8], "little") >> 1


def run_one(engine: Engine, reward: Reward, prompt: str, *, method: str | Method, seed: int = 0,
            sampling: SamplingParams = SamplingParams(), memory_budget: int | None = None,
            measure_memory: bool | None = None, **params) -> Result:
    """One prompt with one method and its `params` (each method's declaration lists them: Best-of-N
    n, batch_size; SR alpha, batch_size, min_tokens, max_init_batch, decision_tokens; ...).
    `measure_memory`: see `prompt_run.measure_memory_default`; out-of-memory retries: `prompt_run.run_method`."""
    method, checked = check_run(method, params, sampling=sampling, seed=seed, memory_budget=memory_budget)
    return run_method(method, checked, engine, reward, prompt, sampling=sampling, seed=seed,
                      memory_budget=memory_budget, measure_memory=measure_memory, shapes=flop_shapes(engine, reward))


def best_of_n(engine: Engine, reward: Reward, prompt: str, *, n: int, batch_size: int | None = None,
              **settings) -> Result:
    """Best-of-N on one prompt (`methods/bon.py`): `run_one` with its declaration; `settings`: seed,
    sampling, memory_budget, measure_memory."""
    from .methods.bon import BEST_OF_N

    return run_one(engine, reward, prompt, method=BEST_OF_N, n=n, batch_size=batch_size, **settings)


def speculative_rejection(engine: Engine, reward: Reward, prompt: str, *, alpha: float,
                          init_batch_size: int | None = None, **settings) -> Result:
    """Speculative Rejection on one prompt (Algorithm 1, `methods/sr.py`): `run_one` with
    its declaration; `settings`: min_tokens, max_init_batch, decision_tokens, seed, sampling,
    memory_budget, measure_memory."""
    from .methods.sr import SPECULATIVE_REJECTION

    return run_one(engine, reward, prompt, method=SPECULATIVE_REJECTION, alpha=alpha, batch_size=init_batch_size,
                   **settings)


class _ReportedReward:
    """A reward whose own exceptions (a bug in a Python reward, a reward model failing on one
    input) become a SpecrejError naming it: that prompt gets an error record, the others go on."""

    def __init__(self, reward: Reward):
        self.reward, self.name = reward, getattr(reward, "name", type(reward).__name__)

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        try:
            return self.reward.score(prompt, responses)
        except SpecrejError:
            raise
        except Exception as error:  # not BaseException: Ctrl-C still stops the run
            raise SpecrejError(f"reward {self.name} failed: {one_line(error)}") from error

    def __getattr__(self, attribute: str):
        return getattr(self.reward, attribute)  # e.g. tokens_processed of a reward model


# a method that raises (not SpecrejError) on this many prompts before any succeeded stops the run
FAIL_FAST_PROMPTS = 3

# the start of a prompt's error when its method completed no response (analysis and the workflow read it)
NO_COMPLETE_RESPONSE = "no complete response"


def run_prompts(prompts: str | os.PathLike | list[PromptItem], out: str | os.PathLike, *, engine: Engine,
                reward: Reward, method: str | Method, model_name: str, reward_name: str, seed: int = 0,
                sampling: SamplingParams = SamplingParams(), memory_budget: int | None = None,
                measure_memory: bool | None = None, progress: bool = True, retry_failed: bool = False,
                selection: str | None = None,
                checked: Params | None = None, on_failure: Callable[[PromptItem, str], None] | None = None,
                **params) -> RecordWriter:
    """Run every prompt not yet in `out` with `method` and its `params` (see `run_one`),
    appending one record per prompt as it finishes: `plan_run`, then `out` opened (a
    `RecordWriter`), then `run_planned`, each once, as `specrej generate` does.

    A prompt that fails gets an error record with the error in one line, and the others go on:
    bad input for that prompt (empty, too long for the model), its reward raising, the method
    itself raising (third-party code, like a reward: its traceback is appended to `out`.log), or
    the method completing no response (every one halted: the error starts with
    NO_COMPLETE_RESPONSE, and the record keeps the whole trajectory, candidates, rounds, timing and
    cost, beside `error`). Each failure is reported as it happens by `on_failure(item, error)`
    (the CLI prints one line); None: a UserWarning `prompt ID: error`. A method that raises on
    each of the first FAIL_FAST_PROMPTS prompts of a run (or on every prompt, when fewer are
    left to run), before any succeeded, stops it with one SpecrejError. The returned (closed)
    writer's `errors` maps the prompt ids that failed, in this run or an earlier one, to their
    errors; a rerun keeps them unless `retry_failed`, which drops the error records and runs
    those prompts again. `out` is locked while the run writes it (`io.output_lock`), and a rerun
    with other settings (`output_settings`, the method's code included) is refused with the
    setting that differs. Bad settings raise SpecrejError (`check_run`) before `out` is opened
    or a prompt read; `checked`: parameters that `check_run` already gave, instead of `params`;
    `selection`: the rule that picks each prompt's answer (None: the method's own, `Method.selection`).

    Each record's params hold the method's setting: {"method", "params", "label"} (the
    configuration key of `analysis`), its `display` (the method's declaration: name, colour,
    marker, reference), the setting's keys flat as well (e.g. n, alpha), `prompt_format` (how the
    prompts were rendered: chat or plain), `model_revision` / `reward_revision` (the hub revisions
    the engine and the reward were loaded at, `load_engine(revision=...)` / `load_reward(revision=...)`,
    only when given: output settings too, so a resume at another revision is refused) and
    `settings_digest`, a digest of `output_settings`.
    """
    plan = plan_run(method, params if checked is None else checked, model_name=model_name, reward_name=reward_name,
                    seed=seed, sampling=sampling, memory_budget=memory_budget,
                    prompt_format=getattr(engine, "prompt_format", "auto"),
                    # as loaded (`load_engine`, `load_reward`): an Engine or reward built otherwise has none
                    model_revision=getattr(engine, "revision", None),
                    reward_revision=getattr(reward, "revision", None),
                    selection=selection)  # before anything is read or written
    items = read_prompts(prompts) if not isinstance(prompts, list) else _checked_items(prompts)
    with RecordWriter(out, plan.settings, retry_failed=retry_failed, unknown=plan.unknown_settings,
                      prompts=items) as writer:
        return run_planned(plan, items, writer, engine=engine, reward=reward, measure_memory=measure_memory,
                           progress=progress, on_failure=on_failure)


def _checked_items(items: list[PromptItem]) -> list[PromptItem]:
    """Prompts given as `PromptItem`s: each reference checked as a prompts file's is (`answers.check_reference`)."""
    for item in items:
        if item.key is not None:
            try:
                check_reference(item.key)
            except SpecrejError as error:
                raise SpecrejError(f"prompt {json.dumps(item.prompt_id)}: {error}") from None
    return items


def run_planned(plan: RunPlan, prompts: list[PromptItem], writer: RecordWriter, *, engine: Engine, reward: Reward,
                measure_memory: bool | None = None, progress: bool = True,
                on_failure: Callable[[PromptItem, str], None] | None = None) -> RecordWriter:
    """The loop of `run_prompts` over an output already opened (`writer`, opened with
    `plan.settings` and `ENGINE_SETTINGS` unknown): the loaded engine's dtype and device settled
    with the writer (a resume with others is refused), then each prompt not yet done run
    (`run_method`) and its record (`prompt_record`) appended. Returns `writer`, still open."""
    settings = writer.settle(engine_settings(engine))
    run_params = _run_params(plan, settings, engine)
    shapes = flop_shapes(engine, reward)
    reward = _ReportedReward(reward)
    log = Path(f"{writer.path}.log")
    report = on_failure or _warn_failure
    todo = [item for item in prompts if item.prompt_id not in writer.done]
    bar = tqdm(todo, desc=f"{plan.method.name} {writer.path.name}", unit="prompt",
               disable=not progress, initial=len(prompts) - len(todo), total=len(prompts))
    succeeded, crashed = 0, 0
    for item in bar:
        params = {**run_params, "prompt_seed": prompt_seed(plan.seed, item.prompt_id)}
        try:
            result = run_method(plan.method, plan.params, engine, reward, item.prompt, sampling=plan.sampling,
                                seed=params["prompt_seed"], memory_budget=plan.memory_budget,
                                measure_memory=measure_memory, shapes=shapes, run_params=params,
                                prompt_id=item.prompt_id,
                                answer_extract=item.key.extract if item.key else "first-number")
        except SpecrejError as error:
            record = prompt_record(plan, item, params, str(error))
        except Exception as error:  # the method's own bug (not BaseException: Ctrl-C still stops the run)
            detail = f"{plan.method.name} failed: {one_line(error)}"
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"prompt {item.prompt_id}: {detail}\n{traceback.format_exc()}\n")
            writer.write(prompt_record(plan, item, params, detail))
            report(item, f"{detail} (traceback in {log})")
            crashed += 1
            if not succeeded and crashed >= min(FAIL_FAST_PROMPTS, len(todo)):
                which = ("on the only prompt to run" if crashed == 1 else f"on all {crashed} prompts to run"
                         if crashed == len(todo) else f"on each of the first {crashed} prompts")
                raise SpecrejError(f"{detail}, {which}; stopping (tracebacks in {log}; rerun with "
                                   "--retry-failed once it is fixed)") from None
            continue
        else:
            record = prompt_record(plan, item, params, result)
        writer.write(record)
        if "error" in record:
            report(item, record["error"])
            continue
        succeeded += 1
        bar.set_postfix(best=f"{record['best']['score']:.3g}", s=f"{record['timing']['total_s']:.1f}")
    return writer


def _run_params(plan: RunPlan, settings: dict, engine: Engine) -> dict:
    """The run's part of every record's params (`session.record_params`), the same for each prompt
    but its `prompt_seed`: the names (with the models' hub revisions, when pinned), the run's seed,
    the prompt format used (chat or plain), the setting's keys flat, the sampling settings, the
    setting, the display, the output settings and their digest."""
    recorded = dict(plan.params)  # as a record holds them: Param.check gives lists, numbers, strings
    pinned = {key: settings[key] for key in ("model_revision", "reward_revision", "selection") if key in settings}
    return {"model": plan.model_name, "reward": plan.reward_name, **pinned, "seed": plan.seed,
            "prompt_format": engine.used_prompt_format(),  # as the prompts were rendered: chat or plain
            **{key: recorded[key] for key in plan.method.setting_keys}, **vars(plan.sampling),
            "setting": {"method": plan.method.name, "params": recorded, "label": plan.method.label(recorded)},
            "display": plan.method.display_record(),
            "output_settings": settings, "settings_digest": settings_digest(settings)[:16]}


def prompt_record(plan: RunPlan, item: PromptItem, run_params: dict, outcome: Result | str) -> dict:
    """A prompt's one record: its trajectory (`Result.to_record`; with an `error` that starts
    NO_COMPLETE_RESPONSE when its method completed no response) or, when `outcome` is the error
    that stopped it, prompt_id, prompt, method, params (the run's part only) and error. Either
    ends with `reference_digest` (`answers.reference_digest`: null for a prompt without a reference),
    which a resume compares with the prompts file's reference now."""
    if isinstance(outcome, str):
        return {"prompt_id": item.prompt_id, "prompt": item.prompt,
                "method": plan.method.record_method or plan.method.name,
                "params": record_params(run_params=run_params), "error": outcome,
                "reference_digest": reference_digest(item.key)}
    record = outcome.to_record(item.prompt_id)
    if record["best"] is None:  # kept whole, so its cost still counts; an error for every reader
        record["error"] = _no_complete_response(plan.method, outcome)
    elif item.key is not None or plan.selection != "reward":
        _with_answers(record, item, plan.selection)
    record["reference_digest"] = reference_digest(item.key)  # what a resume compares (`records.io`)
    return record


def _with_answers(record: dict, item: PromptItem, selection: str) -> None:
    """Every completed candidate's answer (and whether it is right, for a prompt with a reference:
    `records.answers`), the prompt's `reference`, and `best` chosen by the `selection` rule."""
    key = item.key
    record["candidates"] = answered_candidates(record["candidates"], key, key.extract if key else "first-number")
    if key is not None:
        record["reference"] = key.record()
    if selection == "reward":
        return
    finalists = [c for c in record["candidates"] if c["complete"]]
    chosen = finalists[select([c["answer"] for c in finalists], [c["final_score"] for c in finalists], selection)]
    record["best"] = {"candidate_id": chosen["id"], "text": chosen["text"], "score": chosen["final_score"],
                      "num_tokens": chosen["num_tokens"]}


def _warn_failure(item: PromptItem, error: str) -> None:
    warnings.warn(f"prompt {item.prompt_id}: {error}", stacklevel=3)  # at run_prompts' caller


def _no_complete_response(method: Method, result: Result) -> str:
    """Why a prompt has no answer: its method ended with no complete response."""
    if not result.candidates:
        return f"{NO_COMPLETE_RESPONSE}: {method.name} generated none"
    halted = sum(c.halted_round is not None for c in result.candidates)
    return (f"{NO_COMPLETE_RESPONSE}: {method.name} ended with {len(result.candidates)} responses, none complete "
            f"({halted} halted by the method)")


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
