"""`specrej generate | score-prefixes | summary`: argument parsing and nothing else."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING

from ..errors import SpecrejError
from . import machine
from .parser import build_parser

if TYPE_CHECKING:  # imported when a command needs it: `specrej --help` loads no torch
    from ..plan import RunPlan


def doctor(args: argparse.Namespace) -> int:
    from .doctor import Options, iter_checks, report

    return report(iter_checks(Options(device=args.device, fetch=args.fetch, smoke=not args.no_smoke)))


def fetch_models(args: argparse.Namespace) -> None:
    from ..models.loading import prepare_model

    for spec in args.models:
        print(f"{spec}: {prepare_model(spec)}")


PROMPT_WIDTH = 70  # the prompt on one 80-column line: the response is what a reader opens the file for


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _shorten(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


def summarize(args: argparse.Namespace) -> None:
    if args.max_chars is not None and args.max_chars < 1:
        raise SpecrejError(f"--max-chars must be >= 1, got {args.max_chars}")
    for path in args.runs:
        try:
            _summarize_run(path, args.max_chars)
        except (KeyError, TypeError, AttributeError) as error:  # a JSON file that is no run of `specrej generate`
            raise SpecrejError(f"{path} is not a run file of specrej generate (a record lacks "
                               f"{error.args[0] if isinstance(error, KeyError) else 'the expected fields'})") from None


def _failed(record: dict) -> bool:
    """An error record, or a record from before a prompt with no complete response got an error."""
    return "error" in record or record["best"] is None


def _summarize_run(path: str, max_chars: int | None) -> None:
    from ..records.io import read_records

    records = read_records(path)
    if not records:
        raise SpecrejError(f"no complete records in {path}")
    failed = sum(_failed(r) for r in records)
    print(f"== {path}: {len(records)} prompts" + (f", {failed} failed" if failed else "") + "\n")
    for r in records:
        prompt = f"  prompt: {_one_line(r.get('prompt') or '', PROMPT_WIDTH)}"
        if _failed(r):
            print(f"[{r['prompt_id']}] ERROR {r.get('error', 'no complete response')}\n{prompt}\n")
            continue
        best = r["best"]
        print(f"[{r['prompt_id']}] score {best['score']:.4g} | "
              f"{r.get('num_candidates', len(r['candidates']))} candidates, {len(r['rounds'])} rounds | "
              f"{r['tokens']['generated']} tokens in {r['timing']['total_s']:.1f}s "
              f"(score {r['timing']['score_s']:.1f}s) | peak KV {r['peak_kv_bytes'] / 2**20:.1f} MiB")
        print(prompt)
        text = _shorten(best["text"].strip(), max_chars)  # indented, so each record stands apart
        print(f"  response ({best['num_tokens']} tokens):\n    " + text.replace("\n", "\n    ") + "\n")


def run_arguments(args: argparse.Namespace) -> RunPlan:
    """The run's `plan.RunPlan`: the method and its checked parameters from its flags and --param
    NAME=VALUE (each parsed by the method's own declaration), every other setting checked and
    the output settings computed, each once (`plan.plan_run`), before any file is read or model
    loaded; a revision given for a model that is no hub id is refused here too (and again by the
    loaders, for the Python API)."""
    from ..engine.sampling import SamplingParams
    from ..methods import built_in, get_method
    from ..models.loading import check_revision
    from ..plan import plan_run
    from ..rewards.reward import check_reward_revision

    method = get_method(args.method)
    cli_flags = {param.name: param.flag for m in built_in().values() for param in m.params if param.flag}
    given = {name: getattr(args, name) for name in cli_flags if getattr(args, name, None) is not None}
    typed = set()  # the parameters given as --param NAME=VALUE
    for text in args.param:
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise SpecrejError(f"--param must be NAME=VALUE, got {text!r}")
        if name in given:
            raise SpecrejError(f"{method.name}'s parameter {name!r} is given twice")
        given[name] = dataclasses.replace(method.param(name), flag=f"--param {name}").parse(value)
        typed.add(name)
    method = _named_as_typed(method, cli_flags, typed)
    sampling = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    check_revision(args.model, args.model_revision, "model")
    check_reward_revision(args.reward, args.reward_revision)
    return plan_run(method, given, model_name=args.model, reward_name=args.reward, seed=args.seed, sampling=sampling,
                    memory_budget=args.memory_budget, prompt_format=args.prompt_format,
                    reward_batch_size=args.reward_batch_size, model_revision=args.model_revision,
                    reward_revision=args.reward_revision, selection=args.selection)


def _named_as_typed(method, cli_flags: dict[str, str], typed: set[str]):
    """`method` with each parameter named in messages as the command line gives it: `--param NAME`
    when given so; else its own flag, or the option that sets a built-in parameter of its name
    (`--n` for a python:module:attribute method's n), or `--param NAME`."""
    params = []
    for param in method.params:
        option = f"--param {param.name}" if param.name in typed else param.flag or cli_flags.get(param.name)
        params.append(param if option == param.flag else dataclasses.replace(param, flag=option))
    if all(new is old for new, old in zip(params, method.params)):
        return method
    return dataclasses.replace(method, params=tuple(params))


def generate(args: argparse.Namespace) -> int:
    """`specrej generate`, one way through, each step in its own module, entered once:
    (1) every option checked, once (`run_arguments`: `plan.plan_run`); (2) the prompts read
    (`records.prompts`); then `_generate`: (3) the output opened, once (`records.io.RecordWriter`:
    lock, torn tail, finished records, resume check), (4) the generator (`engine.load`) and (5) the
    reward (`rewards.reward`) loaded, (6) the loop over the prompts left (`api.run_planned`), (7) the
    exit status."""
    from ..records.prompts import read_prompts

    plan = run_arguments(args)  # every option and file parameter, before a model loads
    prompts = read_prompts(args.prompts)
    if not prompts:
        raise SpecrejError(f"no prompts in {args.prompts}")
    try:
        return _generate(args, prompts, plan)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (`_signals_stop`): the lock is released
        print(f"specrej: interrupted after {_finished(args.out, prompts)} of {len(prompts)} prompts; {args.out} "
              "holds the finished ones; rerun the same command to resume", file=sys.stderr)
        return _interrupted_status(interrupt)


def _finished(out: str, prompts: list) -> int | str:
    """How many of `prompts` OUT holds a record of (an earlier run's included)."""
    from ..records.io import read_records

    try:
        done = {record["prompt_id"] for record in read_records(out)}
    except (OSError, ValueError, KeyError, TypeError, SpecrejError):
        return "?"
    return sum(item.prompt_id in done for item in prompts)


def _generate(args: argparse.Namespace, prompts: list, plan: RunPlan) -> int:
    from ..api import run_planned
    from ..engine.load import load_engine
    from ..records.io import RecordWriter
    from ..rewards.reward import load_reward
    from .parser import trusts

    # opened once, before any model loads: a second run on OUT, or a resume with other settings, is
    # refused at once; the dtype and device are compared once the generator is loaded (run_planned)
    with RecordWriter(args.out, plan.settings, retry_failed=args.retry_failed,
                      unknown=plan.unknown_settings, prompts=prompts) as writer:
        engine = load_engine(args.model, dtype=args.dtype, device=args.device,
                             trust_remote_code=trusts(args, "model"), revision=args.model_revision,
                             prompt_format=args.prompt_format, compile=args.compile)
        reward = load_reward(args.reward, dtype=args.dtype, device=args.device,
                             trust_remote_code=trusts(args, "reward"), revision=args.reward_revision,
                             batch_size=args.reward_batch_size)
        run_planned(plan, prompts, writer, engine=engine, reward=reward, progress=not args.no_progress,
                    on_failure=_print_failure)
    failed = [(item.prompt_id, writer.errors[item.prompt_id]) for item in prompts if item.prompt_id in writer.errors]
    if not failed:
        return 0
    prompt_id, error = failed[0]
    ids = ", ".join(str(i) for i, _ in failed[:10]) + (", ..." if len(failed) > 10 else "")
    print(f"specrej: {len(failed)} of {len(prompts)} prompts failed ({ids}); the first, prompt {prompt_id}: {error} "
          f"(error records in {args.out}; rerun with --retry-failed to run them again)", file=sys.stderr)
    return 0 if args.exit_zero else 1


def _print_failure(item, error: str) -> None:
    """One line per failed prompt as it fails (above the progress bar)."""
    from tqdm.auto import tqdm

    tqdm.write(f"specrej: prompt {item.prompt_id} failed: " + " ".join(error.splitlines()), file=sys.stderr)


def score_prefixes(args: argparse.Namespace) -> None:
    from ..rewards.prefixes import score_prefix_file
    from .parser import trusts

    score_prefix_file(args.trajectories, args.out, reward=args.reward, decision_tokens=args.decision_tokens,
                      model=args.model, dtype=args.dtype, device=args.device,
                      model_trust_remote_code=trusts(args, "model"), reward_trust_remote_code=trusts(args, "reward"),
                      model_revision=args.model_revision, reward_revision=args.reward_revision,
                      reward_batch_size=args.reward_batch_size, progress=not args.no_progress)


class Terminated(KeyboardInterrupt):
    """SIGTERM while `main` runs, raised as Ctrl-C raises KeyboardInterrupt: `finally` blocks run
    (the output lock is released) and no `except Exception` takes it for a prompt's failure."""


@contextlib.contextmanager
def _signals_stop():
    """SIGTERM raises `Terminated` while `main` runs (only in the main thread, where Python
    handles signals; a SIGTERM the caller ignores stays ignored); the caller's handler is put
    back after, since the workflow calls `main` in its own process (engine_call.py)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def terminate(signum, frame):
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _interrupted_status(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal, as a shell reports a command the signal stopped: 130 (Ctrl-C), 143 (SIGTERM)."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def _own_warning_lines():
    """specrej's own warnings (a prompt retried after out-of-memory, NaN scores) printed as one
    line, `specrej: warning: MESSAGE`, rather than Python's two (the source line beneath); other
    packages' warnings as Python prints them."""
    original = warnings.formatwarning
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def one_line(message, category, filename, lineno, line=None):
        if os.path.abspath(filename).startswith(package + os.sep):
            return "specrej: warning: " + " ".join(str(message).splitlines()) + "\n"
        return original(message, category, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = original


def main(argv: list[str] | None = None) -> int:
    """`specrej ARGV`; returns the exit status: `specrej generate`'s is `parser.GENERATE_EXIT_STATUS`
    (0 all prompts answered, 1 some failed, 2 refused or stopped, 130 / 143 interrupted); the
    other commands give 0, or 2 for bad input (one line on stderr), and doctor 1 when a check
    failed."""
    with _signals_stop(), _own_warning_lines():
        try:
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as exit:  # a usage error (already printed, one line); --help and --version: 0
                if exit.code in (0, None):
                    raise
                return exit.code
            return _run(args)
        except KeyboardInterrupt as interrupt:
            print("specrej: interrupted", file=sys.stderr)
            return _interrupted_status(interrupt)


def _run(args: argparse.Namespace) -> int:
    try:
        if hasattr(args, "threads"):  # the model-running commands: before a model loads
            from ..engine.work_clock import set_threads

            set_threads(args.threads)
        commands = {"generate": generate, "score-prefixes": score_prefixes, "summary": summarize,
                    "fetch-model": fetch_models, "compile": machine.compile_graphs, "calibrate": machine.calibrate,
                    "doctor": doctor}
        return commands[args.command](args) or 0
    except SpecrejError as error:
        print("specrej: error: " + " ".join(str(error).splitlines()), file=sys.stderr)  # one line
        return 2
    except BrokenPipeError:  # `specrej summary RUN.jsonl | head`: the reader left early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout again at exit
        return 1
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        where = f" writing {error.filename}" if error.filename else ""
        print(f"specrej: error: no space left on the device{where}: free some space, then rerun the same command "
              "(finished prompts are kept)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
