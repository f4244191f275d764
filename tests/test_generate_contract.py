"""`specrej generate`'s contract with its user and with a method's author: one line per failed
prompt (no Python warning), an error record for a prompt whose method completed no response, the
exit status as its --help states it, a resume refused once the method's code changed, messages
naming an option as the user types it, and help text for every option."""

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from specrej.api import FAIL_FAST_PROMPTS, output_settings
from specrej.cli.main import main
from specrej.cli.parser import GENERATE_EXIT_STATUS, build_parser
from specrej.engine.sampling import SamplingParams
from specrej.methods import get_method
from specrej.records.io import read_records

DOCS = Path(__file__).resolve().parents[1] / "docs"

# methods from outside the package, as a method author writes them: `n` without a flag of its own
OUTSIDE_METHODS = textwrap.dedent('''
    from specrej.methods import Method, Param


    def halt_everything(session, params):
        """Samples n responses for 2 tokens, then halts them all: no response completes."""
        rollout = session.start(params.n, 4)
        session.step(rollout)
        session.step(rollout)
        session.halt(session.candidates, 0)
        return {"n": params.n}


    def crash(session, params):
        raise ValueError("a bug in the method")


    HALTS = Method(name="halts-all", description="halts every response", run=halt_everything,
                   params=(Param("n", "int", required=True, low=1, help="responses"),),
                   label=lambda params: f"halts N={params['n']}")
    CRASHES = Method(name="crashes", description="raises on every prompt", run=crash,
                     params=(Param("n", "int", default=2, low=1),), label=lambda params: "crashes")
''')


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """The module file of OUTSIDE_METHODS, importable as `outside_methods` (imported afresh)."""
    folder = tmp_path / "code"
    folder.mkdir()
    module = folder / "outside_methods.py"
    module.write_text(OUTSIDE_METHODS)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "outside_methods", raising=False)
    importlib.invalidate_caches()
    return module


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", *extra])


def write_prompts(path: Path, prompts: list[str]) -> Path:
    path.write_text(json.dumps(prompts))
    return path


# -- item 2: a method that completes no response ---------------------------------------------------

def test_a_method_completing_no_response_gives_error_records_that_keep_the_trajectory(
        generator_dir, prompts_file, tmp_path, outside, capsys):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "python:outside_methods:HALTS", "--n", "3") == 1
    err = capsys.readouterr().err
    expected = "no complete response: halts-all ended with 3 responses, none complete (3 halted by the method)"
    for prompt_id in (0, 1, 2):
        assert f"specrej: prompt {prompt_id} failed: {expected}\n" in err
    assert "specrej: 3 of 3 prompts failed (0, 1, 2)" in err
    records = read_records(out)
    for record in records:
        assert record["error"] == expected and record["best"] is None
        assert len(record["candidates"]) == 3 and not any(c["complete"] for c in record["candidates"])
        assert record["candidates"][0]["num_tokens"] == 2 and record["timing"]["total_s"] > 0

    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"== {out}: 3 prompts, 3 failed" in text and f"[0] ERROR {expected}\n" in text and "nan" not in text


# -- item 10: one line per failed prompt, no Python warning -------------------------------------------

def test_a_failed_prompt_is_one_line_of_our_own_and_no_python_warning(generator_dir, tmp_path):
    prompts = write_prompts(tmp_path / "p.json", ["List three fruits.", ""])
    out = tmp_path / "o.jsonl"
    run = subprocess.run([sys.executable, "-m", "specrej.cli.main", "generate", "--model", str(generator_dir),
                          "--prompts", str(prompts), "--out", str(out), "--method", "bon", "--n", "2",
                          "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert not any("Warning" in line or "warnings.warn" in line or "main.py" in line for line in lines), lines
    ours = [line for line in lines if line.startswith("specrej:")]
    assert ours[0] == "specrej: prompt 1 failed: empty prompt" and len(ours) == 2  # then the run's summary line
    assert ours[1].startswith("specrej: 1 of 2 prompts failed (1)")


def test_run_prompts_reports_failures_to_its_callback(engine, tmp_path):
    from specrej.api import run_prompts
    from specrej.records.prompts import PromptItem
    from specrej.rewards.reward import LogProbReward

    failed = []
    writer = run_prompts([PromptItem("a", ""), PromptItem("b", "Hi")], tmp_path / "o.jsonl", engine=engine,
                         reward=LogProbReward(), method="bon", n=2, model_name="m", reward_name="logprob",
                         sampling=SamplingParams(max_new_tokens=4), progress=False,
                         on_failure=lambda item, error: failed.append((item.prompt_id, error)))
    assert failed == [("a", "empty prompt")] and writer.errors == {"a": "empty prompt"}


# -- item 9: the exit status, one contract ----------------------------------------------------------

def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_exit_status_is_stated_once_in_help_docs_and_main(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert flat(GENERATE_EXIT_STATUS) in flat(capsys.readouterr().out)
    assert flat(GENERATE_EXIT_STATUS) in flat((DOCS / "cli.md").read_text())
    assert "GENERATE_EXIT_STATUS" in importlib.import_module("specrej.cli.main").main.__doc__
    assert f"first {FAIL_FAST_PROMPTS} prompts" in GENERATE_EXIT_STATUS


def test_exit_0_when_every_prompt_succeeded_also_on_a_rerun(generator_dir, prompts_file, tmp_path):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2") == 0
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2") == 0  # nothing to do


def test_exit_1_when_some_or_all_failed_also_on_a_rerun_and_0_with_exit_zero(generator_dir, tmp_path, capsys):
    some = write_prompts(tmp_path / "some.json", ["List three fruits.", ""])
    out = tmp_path / "some.jsonl"
    assert generate(generator_dir, some, out, "--method", "bon", "--n", "2") == 1
    assert generate(generator_dir, some, out, "--method", "bon", "--n", "2") == 1  # nothing to do; an error stays
    assert generate(generator_dir, some, out, "--method", "bon", "--n", "2", "--exit-zero") == 0
    every = write_prompts(tmp_path / "every.json", ["", "  "])
    assert generate(generator_dir, every, tmp_path / "every.jsonl", "--method", "bon", "--n", "2") == 1
    assert "2 of 2 prompts failed" in capsys.readouterr().err


@pytest.mark.parametrize("prompts, which", [
    (["a", "b", "c", "d"], f"on each of the first {FAIL_FAST_PROMPTS} prompts"),
    (["a", "b"], "on all 2 prompts to run"),
    (["a"], "on the only prompt to run"),
])
def test_exit_2_when_the_method_raises_on_its_first_prompts_even_with_exit_zero(
        generator_dir, tmp_path, outside, capsys, prompts, which):
    prompts = write_prompts(tmp_path / "p.json", prompts)
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts, out, "--method", "python:outside_methods:CRASHES", "--exit-zero") == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"specrej: error: crashes failed: ValueError: a bug in the method, {which}; stopping")
    assert len(read_records(out)) == min(len(json.loads(prompts.read_text())), FAIL_FAST_PROMPTS)


def test_exit_2_for_bad_input_before_any_model_loads(tmp_path, prompts_file, capsys):
    assert generate(tmp_path / "no-model", prompts_file, tmp_path / "o.jsonl", "--method", "bon", "--n", "0") == 2
    assert capsys.readouterr().err == "specrej: error: --n must be >= 1, got 0\n"


# -- item 6: a changed method's code -----------------------------------------------------------------

def test_a_resume_after_the_outside_method_changed_is_refused(generator_dir, prompts_file, tmp_path, outside,
                                                              capsys, monkeypatch):
    out = tmp_path / "o.jsonl"
    args = ("--method", "python:outside_methods:HALTS", "--n", "2")
    assert generate(generator_dir, prompts_file, out, *args) == 1
    before = out.read_bytes()
    code = read_records(out)[0]["params"]["output_settings"]["method_code"]
    import hashlib

    assert code == "sha256:" + hashlib.sha256(outside.read_bytes()).hexdigest()
    capsys.readouterr()
    outside.write_text(OUTSIDE_METHODS.replace("for 2 tokens", "for 2 tokens (edited)"))
    monkeypatch.delitem(sys.modules, "outside_methods")
    assert generate(generator_dir, prompts_file, out, *args, "--retry-failed") == 2
    assert capsys.readouterr().err == (
        f"specrej: error: {out} holds results made by other code of method halts-all (its module's source changed "
        f"since); rerun into another --out, or delete {out} to rerun every prompt with this code\n")
    assert out.read_bytes() == before


def test_a_built_in_method_is_identified_by_the_package_version(generator_dir, prompts_file, tmp_path, capsys,
                                                               monkeypatch):
    settings = output_settings(get_method("bon"), {"n": 2}, model="m", reward="r", seed=0,
                               sampling=SamplingParams(), memory_budget=None)
    version = metadata.version("specrej")
    assert settings["method_code"] == f"specrej {version}"
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2") == 0
    monkeypatch.setattr("specrej.methods.registry._package_version", lambda: "99.0")
    capsys.readouterr()
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2") == 2
    assert f"holds results made by specrej {version}, and this is specrej 99.0;" in capsys.readouterr().err


# -- item 11: an option named as the user types it -----------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "--n is required for halts every response (responses)"),
    (["--n", "0"], "--n must be >= 1, got 0"),
    (["--param", "n=0"], "--param n must be >= 1, got 0"),
    (["--param", "n=x"], "--param n must be an integer, got 'x'"),
])
def test_an_outside_methods_parameter_is_named_as_typed(tmp_path, prompts_file, outside, capsys, args, message):
    assert generate(tmp_path / "no-model", prompts_file, tmp_path / "o.jsonl",
                    "--method", "python:outside_methods:HALTS", *args) == 2
    assert capsys.readouterr().err == f"specrej: error: {message}\n"


# -- item 13: help text for every option, each default once -------------------------------------------

def generate_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["generate"]


def test_every_generate_option_has_help_and_no_empty_default():
    parser = generate_parser()
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        assert action.help, action.option_strings
        text = formatter._get_help_string(action)
        assert text == action.help if "(default" in action.help else text.count("(default:") <= 1, text
    text = parser.format_help()
    for empty in ("(default: None)", "(default: False)", "(default: [])"):
        assert empty not in text
    assert re.search(r"--top-k TOP_K\s+keep the k most likely tokens.*\(default: 0\)", text, re.DOTALL)


def test_specrejs_own_warnings_print_as_one_line(generator_dir, prompts_file, tmp_path):
    tests = Path(__file__).resolve().parent  # toy_rewards: `broken` gives NaN for every other response
    run = subprocess.run([sys.executable, "-m", "specrej.cli.main", "generate", "--model", str(generator_dir),
                          "--prompts", str(prompts_file), "--out", str(tmp_path / "o.jsonl"), "--method", "bon",
                          "--n", "2", "--reward", "python:toy_rewards:broken", "--max-new-tokens", "8",
                          "--memory-budget", "64MiB", "--no-progress"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tests)})
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert "specrej: warning: reward python:toy_rewards:broken gave NaN/inf scores for prompt " \
           "'Write a poem about the sea.'; they count as -inf" in lines
    assert not any("UserWarning" in line or "warnings.warn" in line for line in lines), lines
