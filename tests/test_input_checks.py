"""Bad numbers and option combinations fail before any model or prompt file is read, with one
line naming the option (exit 2, OUT untouched), in the CLI and the Python API alike; Ctrl-C and
SIGTERM stop a run with only complete lines written, the lock released and a non-zero status,
and the same command then finishes it."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specrej.cli.main import main
from specrej.engine.sampling import SamplingParams
from specrej.errors import SpecrejError
from specrej.records.io import output_lock, read_records
from specrej.records.prompts import PromptItem

TESTS = Path(__file__).parent
NINES = "9" * 400  # a float of inf, an int of 400 digits
HUGE_INT = "9" * 5000  # past Python's 4300-digit int() limit


def slow_length(prompt, responses):
    """`python:test_input_checks:slow_length`: longer is better, 50 ms a prompt, so that a signal
    sent once the first record is written lands while later prompts run."""
    time.sleep(0.05)
    return [float(len(r)) for r in responses]


def sigterm_on_gravity(prompt, responses):
    """`python:test_input_checks:sigterm_on_gravity`: the process gets SIGTERM (from itself) while
    the second prompt of `prompts_file` is scored."""
    if "gravity" in prompt:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once; this never finishes
    return [float(len(r)) for r in responses]


@pytest.fixture
def no_loading(monkeypatch):
    """Reading the prompts or loading a model or reward fails loudly: a case that gets that far was
    not refused by the option checks."""
    import specrej.api  # noqa: F401  imported first: one importing a patched name would keep the patch
    import specrej.rewards.prefixes  # noqa: F401

    def reached(*args, **kwargs):
        raise AssertionError("the option checks let it through: it reached loading")

    monkeypatch.setattr("specrej.records.prompts.read_prompts", reached)
    monkeypatch.setattr("specrej.api.read_prompts", reached)
    monkeypatch.setattr("specrej.engine.load.load_engine", reached)
    monkeypatch.setattr("specrej.models.loading.load_generator", reached)
    monkeypatch.setattr("specrej.rewards.reward.load_reward", reached)
    monkeypatch.setattr("specrej.records.io.read_records", reached)
    monkeypatch.setattr("specrej.rewards.prefixes.read_records", reached)


BON = ["--method", "bon", "--n", "2"]
SR = ["--method", "sr", "--alpha", "0.5"]

# (options after `generate --model M --prompts P --out O`, the message's start, a part of the rest)
BAD_GENERATE = [
    # --n
    (["--method", "bon"], "--n is required for Best-of-N", ""),
    (["--method", "bon", "--n", "0"], "--n must be >= 1, got 0", ""),
    (["--method", "bon", "--n", "-3"], "--n must be >= 1, got -3", ""),
    (["--method", "bon", "--n", "2.5"], "--n must be an integer, got '2.5'", ""),
    (["--method", "bon", "--n", "1e3"], "--n must be an integer, got '1e3'", ""),
    (["--method", "bon", "--n", "nan"], "--n must be an integer, got 'nan'", ""),
    (["--method", "bon", "--n", HUGE_INT], "--n must be an integer, got '999", "..."),
    (["--method", "bon", "--n"], "--n: expected one argument", ""),
    # --alpha
    (["--method", "sr"], "--alpha is required for speculative rejection", ""),
    (["--method", "sr", "--alpha", "1"], "--alpha must be in [0, 1)", "got 1.0"),
    (["--method", "sr", "--alpha", "-0.1"], "--alpha must be in [0, 1)", "got -0.1"),
    (["--method", "sr", "--alpha", "nan"], "--alpha must be in [0, 1)", "got nan"),
    (["--method", "sr", "--alpha", "inf"], "--alpha must be in [0, 1)", "got inf"),
    (["--method", "sr", "--alpha", "1e400"], "--alpha must be in [0, 1)", "got inf"),
    (["--method", "sr", "--alpha", "half"], "--alpha must be a number, got 'half'", ""),
    # the method's options, given to the other method or rule
    ([*BON, "--alpha", "0.5"], "bon (Best-of-N) takes no parameter 'alpha'", "n, batch_size"),
    ([*SR, "--n", "4"], "sr (speculative rejection) takes no parameter 'n'", "batch_size"),
    ([*BON, "--decision-tokens", "8"], "bon (Best-of-N) takes no parameter 'decision_tokens'", ""),
    ([*BON, "--rejection", "adaptive"], "--rejection: was removed; use --method sr-adaptive", ""),
    ([*SR, "--fit", "prefixes.parquet"], "sr (speculative rejection) takes no parameter 'fit'", ""),
    (["--method", "best"], "unknown method 'best'; choose bon, consensus, deepconf, pandora, sr, sr-adaptive, sr-random", ""),
    # --batch-size, --min-tokens, --max-init-batch, --reward-batch-size
    ([*BON, "--batch-size", "0"], "--batch-size must be >= 1, got 0", ""),
    ([*SR, "--batch-size", "-8"], "--batch-size must be >= 1, got -8", ""),
    ([*BON, "--batch-size", "4.0"], "--batch-size must be an integer, got '4.0'", ""),
    ([*SR, "--min-tokens", "0"], "--min-tokens must be >= 1, got 0", ""),
    ([*SR, "--min-tokens", "-1"], "--min-tokens must be >= 1, got -1", ""),
    ([*SR, "--max-init-batch", "0"], "--max-init-batch must be >= 1, got 0", ""),
    ([*SR, "--max-init-batch", "1e3"], "--max-init-batch must be an integer, got '1e3'", ""),
    ([*BON, "--reward-batch-size", "0"], "--reward-batch-size must be >= 1, got 0", ""),
    ([*BON, "--reward-batch-size", "-16"], "--reward-batch-size must be >= 1, got -16", ""),
    # --memory-budget
    ([*BON, "--memory-budget", "0"], "--memory-budget must be > 0 bytes, got 0", ""),
    ([*BON, "--memory-budget", "0GiB"], "--memory-budget must be > 0 bytes, got 0", ""),
    ([*BON, "--memory-budget", "0.4"], "--memory-budget must be > 0 bytes, got 0", ""),
    ([*BON, "--memory-budget=-5MiB"], "--memory-budget must be a memory size such as 2GiB", "got '-5MiB'"),
    ([*BON, "--memory-budget", "-5MiB"], "--memory-budget: expected one argument", ""),
    ([*BON, "--memory-budget", "1e9"], "--memory-budget must be a memory size", "got '1e9'"),
    ([*BON, "--memory-budget", "nan"], "--memory-budget must be a memory size", "got 'nan'"),
    ([*BON, "--memory-budget", "nanGiB"], "--memory-budget must be a memory size", "got 'nanGiB'"),
    ([*BON, "--memory-budget", "inf"], "--memory-budget must be a memory size", "got 'inf'"),
    ([*BON, "--memory-budget", "infMiB"], "--memory-budget must be a memory size", "got 'infMiB'"),
    ([*BON, "--memory-budget", ""], "--memory-budget must be a memory size", "got ''"),
    ([*BON, "--memory-budget", "2 GB of RAM"], "--memory-budget must be a memory size", ""),
    ([*BON, "--memory-budget", "2PiB"], "--memory-budget must be a memory size", "got '2PiB'"),
    ([*BON, "--memory-budget", "2000000TiB"], "--memory-budget must be at most 1 EiB", ""),
    ([*BON, "--memory-budget", NINES], "--memory-budget must be at most 1 EiB", "..."),
    # --decision-tokens
    ([*SR, "--decision-tokens", "0,8"], "--decision-tokens must be >= 1, got 0", ""),
    ([*SR, "--decision-tokens=-4"], "--decision-tokens must be >= 1, got -4", ""),
    ([*SR, "--decision-tokens=8,-4"], "--decision-tokens must be >= 1, got -4", ""),
    ([*SR, "--decision-tokens", "8.5"], "--decision-tokens must be comma-separated integers", "got '8.5'"),
    ([*SR, "--decision-tokens", "8,,16"], "--decision-tokens must be comma-separated integers", "(an empty item)"),
    ([*SR, "--decision-tokens", "8,16,"], "--decision-tokens must be comma-separated integers", "(an empty item)"),
    ([*SR, "--decision-tokens", "8;16"], "--decision-tokens must be comma-separated integers", "got '8;16'"),
    ([*SR, "--decision-tokens", "nan"], "--decision-tokens must be comma-separated integers", "got 'nan'"),
    # --delta
    (["--method", "sr-adaptive", "--delta", "0.7"], "--delta must be in [0, 0.5]", "got 0.7"),
    (["--method", "sr-adaptive", "--delta=-0.01"], "--delta must be in [0, 0.5]", "got -0.01"),
    (["--method", "sr-adaptive", "--delta", "nan"], "--delta must be in [0, 0.5]", "got nan"),
    (["--method", "sr-adaptive", "--delta", "inf"], "--delta must be in [0, 0.5]", "got inf"),
    ([*SR, "--delta", "0.1"], "sr (speculative rejection) takes no parameter 'delta'", ""),
    # --max-new-tokens
    ([*BON, "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0", ""),
    ([*BON, "--max-new-tokens", "-1"], "--max-new-tokens must be >= 1, got -1", ""),
    ([*BON, "--max-new-tokens", "16.0"], "--max-new-tokens must be an integer, got '16.0'", ""),
    # --temperature
    ([*BON, "--temperature=-1"], "--temperature must be 0 (greedy) or a finite number >= 1e-05", "got -1.0"),
    ([*BON, "--temperature", "nan"], "--temperature must be 0 (greedy) or a finite number >= 1e-05", "got nan"),
    ([*BON, "--temperature", "NaN"], "--temperature must be 0 (greedy)", "got nan"),
    ([*BON, "--temperature", "inf"], "--temperature must be 0 (greedy)", "got inf"),
    ([*BON, "--temperature", "1e400"], "--temperature must be 0 (greedy)", "got inf"),
    ([*BON, "--temperature=-inf"], "--temperature must be 0 (greedy)", "got -inf"),
    ([*BON, "--temperature", "1e-300"], "--temperature must be 0 (greedy)", "got 1e-300"),
    ([*BON, "--temperature", "hot"], "--temperature must be a number, got 'hot'", ""),
    # --top-p
    ([*BON, "--top-p", "0"], "--top-p must be in (0, 1], got 0.0", ""),
    ([*BON, "--top-p", "-0"], "--top-p must be in (0, 1], got -0.0", ""),
    ([*BON, "--top-p", "1.01"], "--top-p must be in (0, 1], got 1.01", ""),
    ([*BON, "--top-p", "nan"], "--top-p must be in (0, 1], got nan", ""),
    ([*BON, "--top-p", "inf"], "--top-p must be in (0, 1], got inf", ""),
    # --top-k
    ([*BON, "--top-k=-1"], "--top-k must be >= 0, got -1", ""),
    ([*BON, "--top-k", "0.5"], "--top-k must be an integer, got '0.5'", ""),
    # --seed
    ([*BON, "--seed", "1.5"], "--seed must be an integer, got '1.5'", ""),
    ([*BON, "--seed", "random"], "--seed must be an integer, got 'random'", ""),
    # not an option at all
    ([*BON, "--temprature", "0.7"], "unrecognized arguments: --temprature 0.7", ""),
]


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


@pytest.mark.parametrize("args, start, detail", BAD_GENERATE,
                         ids=[" ".join(a)[:60] for a, _, _ in BAD_GENERATE])
def test_generate_refuses_a_bad_option_before_reading_anything(tmp_path, capsys, no_loading, args, start, detail):
    prompts, out = tmp_path / "p.txt", tmp_path / "o.jsonl"
    prompts.write_text("Write a poem about the sea.\n")
    code = main(["generate", "--model", str(tmp_path / "model"), "--prompts", str(prompts), "--out", str(out),
                 "--no-progress", *args])
    line = one_error_line(capsys)
    assert code == 2
    assert line.startswith(f"specrej: error: {start}"), line
    assert detail in line, line
    assert len(line) < 300  # a 5000-digit value is cut short
    assert not out.exists() and not (tmp_path / "o.jsonl.lock").exists()


def test_a_bad_option_leaves_an_existing_out_as_it_was(generator_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    common = ["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(out),
              "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", *BON]
    assert main(common) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert main([*common, "--temperature", "nan"]) == 2
    assert one_error_line(capsys).startswith("specrej: error: --temperature must be")
    assert out.read_bytes() == before


# values at the edges that are taken: each run gets as far as reading the prompts
GOOD_GENERATE = [
    [*BON, "--n", "1", "--temperature", "0"],
    [*BON, "--temperature=-0"],  # -0.0 is 0: greedy
    [*BON, "--temperature", "1e-5", "--top-p", "1e-9", "--top-k", "0"],
    [*BON, "--temperature", "1e30", "--top-p", "1"],
    [*BON, "--seed=-5"],
    [*BON, "--seed", "9" * 100],
    [*BON, "--batch-size", "64"],  # above n: one batch of n
    [*BON, "--memory-budget", "1B", "--max-new-tokens", "100000"],  # too small / too long: each prompt's error
    [*BON, "--memory-budget", "1024TiB"],
    [*BON, "--memory-budget", " 1.5 gb "],
    [*SR, "--alpha", "0"],
    [*SR, "--alpha", "0.999"],
    [*SR, "--batch-size", "2000", "--max-init-batch", "10"],  # the cap bounds only the default b_init
    [*SR, "--decision-tokens", "16,8,8", "--max-new-tokens", "12"],  # a set; 16 is never reached
    [*SR, "--decision-tokens", " 8, 16 "],
    [*SR, "--decision-tokens", ""],  # none, as by default
    ["--method", "sr-adaptive", "--delta", "0"],
    ["--method", "sr-adaptive", "--delta", "0.5"],
]


@pytest.mark.parametrize("args", GOOD_GENERATE, ids=[" ".join(a)[:60] for a in GOOD_GENERATE])
def test_generate_takes_the_edge_values(tmp_path, capsys, no_loading, args):
    prompts, out = tmp_path / "p.txt", tmp_path / "o.jsonl"
    prompts.write_text("Write a poem about the sea.\n")
    with pytest.raises(AssertionError, match="reached loading"):
        main(["generate", "--model", str(tmp_path / "model"), "--prompts", str(prompts), "--out", str(out),
              "--no-progress", *args])
    assert capsys.readouterr().err == ""


# a prompts file's reference answer that no response could match: (its fields, the message's rest)
UNMATCHABLE_ANSWERS = [
    ({"answer": ""}, "its answer is empty, so every response would be marked wrong; give the reference answer, "
                     "or leave out `answer` for a prompt without one"),
    ({"answer": "  ", "check": "exact"}, "its answer is empty, so every response would be marked wrong; give the "
                                         "reference answer, or leave out `answer` for a prompt without one"),
    ({"answer": "Paris"}, "its answer 'Paris' is not a number, which check numeric (the default) needs, so every "
                          "response would be marked wrong; give a number, or another check (exact, math)"),
    ({"answer": "\\frac{1}{", "check": "math"},
     "its answer '\\\\frac{1}{' cannot be parsed by math-verify (check math), so every response would be marked "
     "wrong; give the answer as a LaTeX expression math-verify reads, or another check (exact)"),
]


@pytest.fixture
def no_models(monkeypatch):
    """Loading a model or a reward fails loudly (the prompts file is read): a case that gets that far
    was not refused by the input checks."""
    import specrej.api  # noqa: F401

    def reached(*args, **kwargs):
        raise AssertionError("the input checks let it through: it reached loading")

    monkeypatch.setattr("specrej.engine.load.load_engine", reached)
    monkeypatch.setattr("specrej.models.loading.load_generator", reached)
    monkeypatch.setattr("specrej.rewards.reward.load_reward", reached)


@pytest.mark.parametrize("fields, rest", UNMATCHABLE_ANSWERS, ids=[json.dumps(f) for f, _ in UNMATCHABLE_ANSWERS])
def test_an_answer_no_response_could_match_is_refused_before_the_model_loads(tmp_path, capsys, no_models,
                                                                              fields, rest):
    if fields.get("check") == "math":
        pytest.importorskip("math_verify")
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(json.dumps({"prompt_id": "q1", "prompt": "Q: 3 + 4?\nA:", "answer": "7"}) + "\n"
                       + json.dumps({"prompt_id": "q2", "prompt": "Q: 5 + 5?\nA:", **fields}) + "\n")
    code = main(["generate", "--model", str(tmp_path / "model"), "--prompts", str(prompts), "--out", str(out),
                 "--no-progress", *BON])
    assert code == 2
    assert one_error_line(capsys) == f"specrej: error: {prompts}: entry 1: {rest}"
    assert not out.exists() and not (tmp_path / "o.jsonl.lock").exists()


def test_run_prompts_refuses_such_an_answer_among_its_prompt_items(tmp_path, no_loading):
    from specrej.api import run_prompts
    from specrej.records.answers import AnswerKey

    out = tmp_path / "o.jsonl"
    with pytest.raises(SpecrejError, match='^prompt "q2": its answer is empty, so every response would be marked'):
        run_prompts([PromptItem("q1", "Hi", AnswerKey("7")), PromptItem("q2", "Hi", AnswerKey(""))], out,
                    engine=None, reward=None, model_name="m", reward_name="r", progress=False, method="bon", n=2)
    assert not out.exists()


def test_answers_that_can_be_matched_are_read(tmp_path):
    from specrej.records.prompts import read_prompts

    prompts = tmp_path / "p.jsonl"
    good = [{"answer": 7}, {"answer": "1,234"}, {"answer": " 3/4 "}, {"answer": "-0.5"},
            {"answer": "Paris", "check": "exact", "extract": "first-line"}, {"extract": "boxed"}]
    prompts.write_text("".join(json.dumps({"prompt": "Q?", **fields}) + "\n" for fields in good))
    assert [item.key.answer for item in read_prompts(prompts)] == ["7", "1,234", " 3/4 ", "-0.5", "Paris", None]
    if importlib.util.find_spec("math_verify"):
        prompts.write_text(json.dumps({"prompt": "Q?", "answer": "\\frac{1}{2}", "check": "math"}) + "\n")
        assert read_prompts(prompts)[0].key.check == "math"


BAD_PREFIXES = [
    (["--decision-tokens", "0,8"], "--decision-tokens must be positive integers, got 0"),
    (["--decision-tokens=-4"], "--decision-tokens must be positive integers, got -4"),
    (["--decision-tokens", ","], "--decision-tokens: no decision tokens given"),
    (["--decision-tokens", ""], "--decision-tokens: no decision tokens given"),
    (["--decision-tokens", "8,,16"], "--decision-tokens must be comma-separated integers"),
    (["--decision-tokens", "8.5"], "--decision-tokens must be comma-separated integers"),
    (["--decision-tokens", "8", "--reward-batch-size", "0"], "--reward-batch-size must be >= 1, got 0"),
    (["--decision-tokens", "8", "--reward-batch-size", "2.5"], "--reward-batch-size must be an integer, got '2.5'"),
    ([], "the following arguments are required: --decision-tokens"),
]


@pytest.mark.parametrize("args, start", BAD_PREFIXES, ids=[" ".join(a) for a, _ in BAD_PREFIXES])
def test_score_prefixes_refuses_a_bad_option_before_reading_anything(tmp_path, capsys, no_loading, args, start):
    trajectories, out = tmp_path / "run.jsonl", tmp_path / "prefix.parquet"
    trajectories.write_text("")
    code = main(["score-prefixes", "--trajectories", str(trajectories), "--reward", "logprob", "--out", str(out),
                 "--no-progress", *args])
    line = one_error_line(capsys)
    assert code == 2 and line.startswith(f"specrej: error: {start}"), line
    assert not out.exists()


@pytest.mark.parametrize("value, start", [("0", "--max-chars must be >= 1, got 0"),
                                          ("-5", "--max-chars must be >= 1, got -5"),
                                          ("ten", "--max-chars must be an integer, got 'ten'")])
def test_summary_refuses_a_bad_max_chars(tmp_path, capsys, no_loading, value, start):
    assert main(["summary", str(tmp_path / "run.jsonl"), f"--max-chars={value}"]) == 2
    assert one_error_line(capsys).startswith(f"specrej: error: {start}")


# the Python API: run_prompts refuses the same values, with the same messages, before `out` is opened
BAD_API = [
    (dict(method="bon", n=0), "--n must be >= 1, got 0"),
    (dict(method="bon", n=2.0), "--n must be an integer >= 1, got 2.0"),
    (dict(method="bon", n=True), "--n must be an integer >= 1, got True"),
    (dict(method="bon", n="4"), "--n must be an integer >= 1, got '4'"),
    (dict(method="bon", n=None), "--n is required for Best-of-N"),
    (dict(method="bon", n=2, alpha=0.5), "bon (Best-of-N) takes no parameter 'alpha'"),
    (dict(method="sr", alpha=math.nan), "--alpha must be in [0, 1), got nan"),
    (dict(method="sr", alpha="0.5"), "--alpha must be a number in [0, 1), got '0.5'"),
    (dict(method="sr", alpha=0.5, n=8), "sr (speculative rejection) takes no parameter 'n'"),
    (dict(method="beam", n=2), "unknown method 'beam'"),
    (dict(method="bon", n=2, seed=1.5), "--seed must be an integer, got 1.5"),
    (dict(method="bon", n=2, batch_size=0), "--batch-size must be >= 1, got 0"),
    (dict(method="bon", n=2, memory_budget="2GiB"), "--memory-budget must be a number of bytes"),
    (dict(method="bon", n=2, memory_budget=-1), "--memory-budget must be > 0 bytes, got -1"),
    (dict(method="bon", n=2, memory_budget=2**61), "--memory-budget must be at most 1 EiB"),
    (dict(method="bon", n=2, memory_budget=math.inf), "--memory-budget must be a number of bytes (an integer)"),
    (dict(method="sr", alpha=0.5, min_tokens=0), "--min-tokens must be >= 1, got 0"),
    (dict(method="sr", alpha=0.5, max_init_batch=0), "--max-init-batch must be >= 1, got 0"),
    (dict(method="sr", alpha=0.5, decision_tokens=[8, 0]), "--decision-tokens must be >= 1, got 0"),
    (dict(method="sr", alpha=0.5, decision_tokens=iter([8, 4.5])), "--decision-tokens must be an integer >= 1"),
    (dict(method="sr", alpha=0.5, decision_tokens="8,16"), "--decision-tokens must be a list of integers"),
    (dict(method="sr-adaptive", alpha=0.5, delta=math.nan), "--delta must be in [0, 0.5], got nan"),
    (dict(method="sr", alpha=0.5, fit="x.parquet"), "sr (speculative rejection) takes no parameter 'fit'"),
    (dict(method="sr-adaptive", fit="no/such.parquet"), "--fit: file not found: no/such.parquet"),
    (dict(method="bon", n=2, sampling={"temperature": 0.7}), "sampling must be a SamplingParams"),
]


@pytest.mark.parametrize("kwargs, start", BAD_API, ids=[str(k)[:60] for k, _ in BAD_API])
def test_run_prompts_refuses_the_same_values_before_opening_out(tmp_path, no_loading, kwargs, start):
    from specrej.api import run_prompts

    out = tmp_path / "o.jsonl"
    with pytest.raises(SpecrejError) as error:
        run_prompts([PromptItem(0, "Hi")], out, engine=None, reward=None, model_name="m", reward_name="r",
                    progress=False, **kwargs)
    assert str(error.value).startswith(start), str(error.value)
    assert not out.exists() and not (tmp_path / "o.jsonl.lock").exists()


@pytest.mark.parametrize("kwargs, start", [
    (dict(temperature=math.nan), "--temperature must be 0 (greedy) or a finite number >= 1e-05, got nan"),
    (dict(temperature=-0.5), "--temperature must be 0 (greedy)"),
    (dict(temperature=math.inf), "--temperature must be 0 (greedy)"),
    (dict(temperature=1e-9), "--temperature must be 0 (greedy)"),
    (dict(temperature="0.7"), "--temperature must be 0 (greedy)"),
    (dict(top_p=math.nan), "--top-p must be in (0, 1], got nan"),
    (dict(top_p=0.0), "--top-p must be in (0, 1], got 0.0"),
    (dict(top_p=1.5), "--top-p must be in (0, 1], got 1.5"),
    (dict(top_k=-1), "--top-k must be >= 0, got -1"),
    (dict(top_k=5.0), "--top-k must be an integer >= 0, got 5.0"),
    (dict(max_new_tokens=0), "--max-new-tokens must be >= 1, got 0"),
    (dict(max_new_tokens=True), "--max-new-tokens must be an integer >= 1, got True"),
])
def test_sampling_params_refuse_bad_values(kwargs, start):
    with pytest.raises(SpecrejError) as error:
        SamplingParams(**kwargs)
    assert str(error.value).startswith(start), str(error.value)


def test_sampling_params_store_plain_numbers():
    import numpy as np

    params = SamplingParams(temperature=-0.0, top_p=np.float32(0.5), top_k=np.int64(50), max_new_tokens=np.int32(8))
    assert json.dumps(vars(params)) == '{"temperature": 0.0, "top_p": 0.5, "top_k": 50, "max_new_tokens": 8}'


# -- interrupts ------------------------------------------------------------------------------------

def test_sigterm_inside_main_stops_the_run_and_the_handler_is_put_back(generator_dir, prompts_file, tmp_path,
                                                                        capsys):
    out = tmp_path / "o.jsonl"

    def callers_handler(signum, frame):  # what a caller of main had installed; main must use its own
        raise RuntimeError("main left SIGTERM to its caller")

    original = signal.signal(signal.SIGTERM, callers_handler)
    try:
        code = main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(out),
                     "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", *BON,
                     "--reward", "python:test_input_checks:sigterm_on_gravity"])
        assert signal.getsignal(signal.SIGTERM) is callers_handler  # put back: engine_call.py runs main in-process
    finally:
        signal.signal(signal.SIGTERM, original)
    assert code == 143
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"specrej: interrupted after 1 of 3 prompts; {out} holds the finished ones; rerun the same command to resume")
    assert [r["prompt_id"] for r in read_records(out)] == [0]  # prompt 1 has no error record: it was not done
    assert not (tmp_path / "o.jsonl.lock").exists()


def test_main_in_another_thread_leaves_signals_alone(tmp_path, capsys):
    import threading

    codes = []
    thread = threading.Thread(target=lambda: codes.append(main(["summary", str(tmp_path / "none.jsonl")])))
    thread.start()
    thread.join()
    assert codes == [2] and "no complete records" in capsys.readouterr().err


NUM_PROMPTS = 40


def cli_command(generator_dir, prompts, out) -> list[str]:
    return [sys.executable, "-m", "specrej.cli.main", "generate", "--model", str(generator_dir), "--prompts", str(prompts),
            "--out", str(out), "--method", "bon", "--n", "2", "--max-new-tokens", "8", "--memory-budget", "64MiB",
            "--device", "cpu", "--dtype", "float32", "--no-progress",
            "--reward", "python:test_input_checks:slow_length"]


def child_env() -> dict:
    """The tests folder on the path, for the `python:test_input_checks:...` reward."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}


def start(command: list[str]) -> subprocess.Popen:
    # Ctrl-C's default action even when this test runs where SIGINT is ignored (a background job)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def complete_lines(path: Path) -> list[bytes]:
    data = path.read_bytes() if path.exists() else b""
    return [line for line in data.splitlines(keepends=True) if line.endswith(b"\n")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_keeps_complete_lines_and_the_same_command_resumes_it(generator_dir, tmp_path, signum):
    prompts, out = tmp_path / "p.txt", tmp_path / "o.jsonl"
    prompts.write_text("".join(f"Prompt {i}: write a poem about the sea.\n" for i in range(NUM_PROMPTS)))
    command = cli_command(generator_dir, prompts, out)
    child = start(command)
    deadline = time.monotonic() + 120
    while not complete_lines(out):  # the models are loaded and the first prompt is written
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no record within 120 s"
        time.sleep(0.02)
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)

    assert child.returncode == 128 + signum, err
    data = out.read_bytes()
    assert data.endswith(b"\n")
    records = [json.loads(line) for line in data.splitlines()]  # every line is a whole record
    done = len(records)
    assert 1 <= done < NUM_PROMPTS
    assert [r["prompt_id"] for r in records] == list(range(done)) and not any("error" in r for r in records)
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (f"specrej: interrupted after {done} of {NUM_PROMPTS} prompts; {out} holds the "
                                    "finished ones; rerun the same command to resume")
    assert not (tmp_path / "o.jsonl.lock").exists()
    with output_lock(out):  # nobody holds it
        pass

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300, env=child_env())
    assert rerun.returncode == 0, rerun.stderr
    assert out.read_bytes().startswith(data)  # the finished prompts are kept, not redone
    assert [r["prompt_id"] for r in read_records(out)] == list(range(NUM_PROMPTS))  # each once
