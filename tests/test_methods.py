"""Methods as plug-ins: declarations and their checks, a method from outside the project in one
file, the random-halting control, the memory guard, and resume refusing any changed setting."""

from __future__ import annotations

import json
import random
import sys
import textwrap
from pathlib import Path

import pytest

from specrej.cli.main import main
from specrej.errors import SpecrejError
from specrej.methods import Method, Param, built_in, get_method
from specrej.methods.cuts import num_kept
from specrej.methods.random_halting import RandomCut
from specrej.methods.session import Candidate
from specrej.methods.sr import memory_guard
from specrej.records.io import read_records


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "16", "--memory-budget", "64MiB", "--no-progress", *extra])


# ------------------------------------------------------------------------------------------
# declarations
# ------------------------------------------------------------------------------------------


def test_built_in_methods_and_their_labels():
    methods = built_in()
    assert list(methods) == ["bon", "consensus", "deepconf", "pandora", "sr", "sr-adaptive", "sr-random", "st-bon"]
    assert methods["bon"].label({"n": 16}) == "Bo16"
    assert methods["sr"].label({"alpha": 0.5}) == "SR α=0.5"
    assert methods["sr-adaptive"].label({"delta": 0.05}) == "SR δ=0.05"
    assert methods["sr-random"].label({"alpha": 0.7}) == "Random SR α=0.7"
    assert methods["st-bon"].label({"n": 32}) == "ST-BoN N=32" and methods["st-bon"].setting_name({"n": 32}) == "n32"
    assert methods["sr"].setting_name({"alpha": 0.5}) == "alpha0.5"
    assert methods["sr-adaptive"].setting_name({"delta": 0.05}) == "delta0.05"
    consensus = methods["consensus"].check({"n": 16})
    assert methods["consensus"].label(consensus) == "Consensus N=16 w=4"
    assert methods["consensus"].label({**consensus, "threshold": 0.9}) == "Consensus N=16 w=4 p=0.9"
    assert methods["consensus"].setting_name(consensus) == "n16-wave4-threshold0.95"


def test_check_fills_defaults_and_refuses_what_the_method_does_not_take():
    sr = get_method("sr")
    assert dict(sr.check({"alpha": 0.5})) == {"alpha": 0.5, "batch_size": None, "min_tokens": 8, "max_init_batch": 1000,
                                          "decision_tokens": []}
    with pytest.raises(SpecrejError, match=r"^sr \(speculative rejection\) takes no parameter 'n' \(its parameters: "
                                           r"alpha, batch_size, min_tokens, max_init_batch, decision_tokens\)$"):
        sr.check({"alpha": 0.5, "n": 4})
    with pytest.raises(SpecrejError, match=r"^--alpha must be in \[0, 1\), got 1.0$"):
        sr.check({"alpha": 1.0})
    with pytest.raises(SpecrejError, match=r"^--alpha is required for speculative rejection"):
        sr.check({})


@pytest.mark.parametrize("param, text, value", [
    (Param("k", "int", low=1), "3", 3),
    (Param("x", "float", low=0, high=1, high_open=True), "0.25", 0.25),
    (Param("taus", "ints", low=1), "8,16", [8, 16]),
    (Param("flag", "bool"), "true", True),
    (Param("mode", "str", choices=("a", "b")), "b", "b"),
])
def test_param_parses_command_line_text(param, text, value):
    assert param.check(param.parse(text), "m") == value


@pytest.mark.parametrize("param, value, message", [
    (Param("k", "int", low=1), 0, "--param k must be >= 1, got 0"),
    (Param("k", "int", low=1), 2.0, "--param k must be an integer >= 1, got 2.0"),
    (Param("x", "float", low=0, high=1, high_open=True), float("nan"), "--param x must be in [0, 1), got nan"),
    (Param("x", "float", low=0, high=1, high_open=True), 1, "--param x must be in [0, 1), got 1"),
    (Param("x", "float", low=0, low_open=True), 0.0, "--param x must be in (0, inf], got 0.0"),
    (Param("mode", "str", choices=("a", "b")), "c", "--param mode must be one of a, b, got 'c'"),
    (Param("taus", "ints", low=1), [4, 0], "--param taus must be >= 1, got 0"),
    (Param("k", "int", required=True), None, "--param k is required for my method"),
])
def test_param_checks_name_the_option(param, value, message):
    with pytest.raises(SpecrejError) as error:
        param.check(value, "my method")
    assert str(error.value) == message


def test_a_python_method_spec_must_name_a_method(tmp_path, monkeypatch):
    (tmp_path / "not_a_method.py").write_text("THING = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SpecrejError, match="is a int, not a specrej.methods.Method"):
        get_method("python:not_a_method:THING")
    with pytest.raises(SpecrejError, match="cannot import 'NOPE'"):
        get_method("python:not_a_method:NOPE")
    with pytest.raises(SpecrejError, match="unknown method 'beam'"):
        get_method("beam")


# ------------------------------------------------------------------------------------------
# a method from outside the project: one file on PYTHONPATH, no project file edited
# ------------------------------------------------------------------------------------------

def documented_method() -> str:
    """The outside method of docs/methods.md ("Adding a method"), as the page shows it."""
    page = (Path(__file__).parents[1] / "docs" / "methods.md").read_text(encoding="utf-8")
    block = page.split("<!-- example: outside_method.py -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


OUTSIDE_METHOD = documented_method()


def test_a_method_from_outside_the_project_runs_through_the_cli(generator_dir, prompts_file, tmp_path, monkeypatch,
                                                                 capsys):
    (tmp_path / "outside_method.py").write_text(OUTSIDE_METHOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "outside_method", raising=False)  # imported afresh from this folder
    out = tmp_path / "first.jsonl"
    monkeypatch.setenv("SPECREJ_MEASURE_MEMORY", "0")
    assert generate(generator_dir, prompts_file, out, "--method", "python:outside_method:PREFIX_TOP_K",
                    "--param", "n=6", "--param", "keep=2", "--reward", "python:toy_rewards:letter_e") == 0
    records = read_records(out)
    assert len(records) == 3
    for record in records:
        assert record["method"] == "prefix-top-k" and "error" not in record
        assert record["params"]["setting"] == {"method": "prefix-top-k", "params": {"n": 6, "at": 4, "keep": 2},
                                               "label": "Top 2 of 6"}
        assert record["params"]["display"] == {"name": "Prefix top-k", "color": "#b15928", "marker": "o",
                                               "reference": False}
        assert len(record["candidates"]) == 6 and record["flops"]["total"] > 0
        if record["rounds"]:
            decision = record["rounds"][0]
            halted = [c for c in record["candidates"] if c["halted_round"] == 0]
            assert decision["decision_token"] == 4 and len(halted) == decision["batch_before"] - 2
            # the two best prefixes went on: every halted prefix scores at most the lowest kept one
            assert all(c["num_tokens"] == 4 for c in halted)
            assert all(c["text"].count("e") / max(1, len(c["text"])) <= decision["rule"]["cutoff"] for c in halted)
    # its parameters are checked by its own declaration
    assert generate(generator_dir, prompts_file, tmp_path / "bad.jsonl", "--method",
                    "python:outside_method:PREFIX_TOP_K", "--param", "n=0") == 2
    assert capsys.readouterr().err.strip().endswith("--param n must be >= 1, got 0")
    assert generate(generator_dir, prompts_file, tmp_path / "bad.jsonl", "--method",
                    "python:outside_method:PREFIX_TOP_K", "--param", "n=2", "--param", "beam=4") == 2
    assert "prefix-top-k (prefix top-k) takes no parameter 'beam'" in capsys.readouterr().err
    assert not (tmp_path / "bad.jsonl").exists()


# ------------------------------------------------------------------------------------------
# random-halting SR
# ------------------------------------------------------------------------------------------


def test_random_cut_keeps_a_uniform_draw_of_the_alpha_cuts_size():
    ids, scores = [3, 1, 4, 0, 2, 5], [0.9, 0.8, 0.5, 0.4, 0.2, 0.1]
    cut = RandomCut(0.5, seed=7)
    keep, why = cut(ids, scores, tau=8)
    # independently: the same draws from random.Random(7), one per id in order, the 3 highest kept
    draws = dict(zip(ids, _draws(7, len(ids))))
    expected = set(sorted(ids, key=lambda i: -draws[i])[:num_kept(6, 0.5)])
    assert {i for i, k in zip(ids, keep) if k} == expected and sum(keep) == 3
    assert why == {"rule": "random", "alpha": 0.5, "kept": 3,
                   "cutoff": min(s for s, k in zip(scores, keep) if k)}
    assert cut.priority(ids, scores) == [draws[i] for i in ids]
    assert RandomCut(0.5, seed=7)(ids, scores, 8)[0] == keep  # seeded: the same rows again


def _draws(seed: int, count: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() for _ in range(count)]


def test_memory_guard_halts_the_lowest_priority_first_whatever_the_order():
    rows = [Candidate(i) for i in (5, 2, 9, 7)]
    priority = {5: 0.1, 2: 0.9, 9: 0.5, 7: 0.5}
    kept, halted = memory_guard(rows, priority, room=2)
    assert [c.id for c in kept] == [2, 7] and [c.id for c in halted] == [9, 5]  # tie 7/9: the higher id goes
    assert memory_guard(rows, priority, room=None)[1] == []


def test_random_halting_sr_follows_srs_schedule_with_random_rows(generator_dir, prompts_file, tmp_path):
    common = ["--alpha", "0.5", "--batch-size", "16", "--memory-budget", "160KiB", "--seed", "3"]
    sr, rnd = tmp_path / "sr.jsonl", tmp_path / "random.jsonl"
    assert generate(generator_dir, prompts_file, sr, "--method", "sr", *common) == 0
    assert main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(rnd),
                 "--max-new-tokens", "16", "--no-progress", "--method", "sr-random", *common]) == 0
    top_kept = []
    for record in read_records(rnd):
        assert record["method"] == "sr-random" and record["params"]["rejection"]["rule"] == "random"
        assert record["rounds"], "the budget forces rounds"
        for rnd_round in record["rounds"]:
            assert rnd_round["rule"]["rule"] == "random"
            assert rnd_round["rule"]["accepted"] == num_kept(rnd_round["ranked"], 0.5)  # exactly the alpha cut's size
        # which rows went on: not always the best-scoring ones
        for index in range(len(record["rounds"])):
            scored = [(c["round_scores"][index], c["halted_round"] != index) for c in record["candidates"]
                      if len(c["round_scores"]) > index]
            top = sorted(scored, key=lambda x: -x[0])[:sum(went for _, went in scored)]
            top_kept.append(all(went for _, went in top))
    assert not all(top_kept)
    again = tmp_path / "again.jsonl"
    assert main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(again),
                 "--max-new-tokens", "16", "--no-progress", "--method", "sr-random", *common]) == 0
    assert [r["candidates"] for r in read_records(again)] == [r["candidates"] for r in read_records(rnd)]


# ------------------------------------------------------------------------------------------
# resume: every setting that changes the output is compared
# ------------------------------------------------------------------------------------------

SR_RUN = ["--method", "sr", "--alpha", "0.5", "--batch-size", "8"]


@pytest.mark.parametrize("change, key", [
    (["--alpha", "0.25"], "param.alpha"),
    (["--batch-size", "4"], "param.batch_size"),
    (["--min-tokens", "4"], "param.min_tokens"),
    (["--max-init-batch", "500"], "param.max_init_batch"),
    (["--decision-tokens", "4"], "param.decision_tokens"),
    (["--memory-budget", "32MiB"], "memory_budget"),
    (["--seed", "1"], "seed"),
    (["--temperature", "0.5"], "temperature"),
    (["--top-p", "0.9"], "top_p"),
    (["--top-k", "5"], "top_k"),
    (["--max-new-tokens", "12"], "max_new_tokens"),
    (["--reward", "python:toy_rewards:letter_e"], "reward"),
    (["--method", "sr-random"], "method"),
    (["--dtype", "bfloat16"], "dtype"),
])
def test_a_rerun_with_any_changed_setting_is_refused_and_the_file_untouched(generator_dir, tmp_path, capsys, change,
                                                                              key):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Write a poem about the sea.\n")
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, prompts, out, *SR_RUN) == 0
    before = out.read_bytes()
    prompts.write_text("Write a poem about the sea.\nList three fruits.\n")  # one more prompt to do
    capsys.readouterr()
    assert generate(generator_dir, prompts, out, *SR_RUN, *change) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specrej")]
    assert len(error) == 1 and f"holds results made with other settings ({key}: " in error[0], error
    assert out.read_bytes() == before
    assert generate(generator_dir, prompts, out, *SR_RUN) == 0  # the same settings resume
    assert len(read_records(out)) == 2


def test_a_changed_fit_file_is_refused_though_its_path_is_the_same(generator_dir, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Write a poem about the sea.\nExplain gravity to a child.\n")
    full = tmp_path / "full.jsonl"
    assert generate(generator_dir, prompts, full, "--method", "bon", "--n", "8") == 0
    fit = tmp_path / "fit.parquet"
    assert main(["score-prefixes", "--trajectories", str(full), "--reward", "logprob", "--decision-tokens", "4,8",
                 "--out", str(fit), "--no-progress"]) == 0
    adaptive = ["--method", "sr-adaptive", "--delta", "0.2", "--batch-size", "8", "--fit", str(fit)]
    out = tmp_path / "adaptive.jsonl"
    one = tmp_path / "one.txt"
    one.write_text("Write a poem about the sea.\n")
    assert generate(generator_dir, one, out, *adaptive) == 0
    before = out.read_bytes()
    assert main(["score-prefixes", "--trajectories", str(full), "--reward", "logprob", "--decision-tokens", "2,4",
                 "--out", str(fit), "--no-progress"]) == 0  # another fit, the same path
    capsys.readouterr()
    assert generate(generator_dir, prompts, out, *adaptive) == 2
    assert "(param.fit: 'sha256:" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_records_carry_the_setting_and_a_digest_of_every_output_setting(generator_dir, prompts_file, tmp_path):
    out = tmp_path / "sr.jsonl"
    assert generate(generator_dir, prompts_file, out, *SR_RUN) == 0
    record = read_records(out)[0]
    params = record["params"]
    assert params["setting"] == {"method": "sr", "label": "SR α=0.5",
                                 "params": {"alpha": 0.5, "batch_size": 8, "min_tokens": 8, "max_init_batch": 1000,
                                            "decision_tokens": []}}
    settings = params["output_settings"]
    assert settings["method"] == "sr" and settings["dtype"] == "float32" and settings["device"] == "cpu"
    assert settings["memory_budget"] == 64 * 2**20 and settings["param.alpha"] == 0.5
    import hashlib

    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    assert params["settings_digest"] == hashlib.sha256(text.encode()).hexdigest()[:16]


BROKEN_METHOD = textwrap.dedent('''
    from specrej.methods import Method, Param, get_method

    BON = get_method("bon")
    calls = []


    def run(session, params):
        calls.append(session.prompt)
        if len(calls) in params.fail_on:
            raise RuntimeError("a bug in this method\\nsecond line")
        return BON.run(session, BON.check({"n": 2}))


    SOMETIMES = Method(name="sometimes", description="fails on some calls", run=run,
                       params=(Param("fail_on", "ints", default=()),), label=lambda p: "sometimes")
''')


def test_a_method_that_raises_fails_its_prompt_alone(generator_dir, prompts_file, tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_method.py").write_text(BROKEN_METHOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run.jsonl"
    run = ["--method", "python:broken_method:SOMETIMES", "--param", "fail_on=2"]
    assert generate(generator_dir, prompts_file, out, *run) == 1  # a prompt failed: non-zero at the end
    err = capsys.readouterr().err
    records = read_records(out)
    assert [("error" in r) for r in records] == [False, True, False]  # the third prompt still ran
    assert records[1]["error"] == "sometimes failed: RuntimeError: a bug in this method"
    assert "Traceback" not in err and "1 of 3 prompts failed (1)" in err and "--retry-failed" in err
    assert "Traceback" in (tmp_path / "run.jsonl.log").read_text()  # the traceback goes to the log
    # a rerun keeps the error record; --retry-failed runs that prompt again (now the method works)
    assert generate(generator_dir, prompts_file, out, *run) == 1
    assert generate(generator_dir, prompts_file, out, *run, "--retry-failed") == 0
    assert [("error" in r) for r in read_records(out)] == [False, False, False]


def test_a_method_that_raises_on_every_prompt_stops_early_with_one_line(generator_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "always_broken.py").write_text(BROKEN_METHOD)  # a module of its own: its own call count
    monkeypatch.syspath_prepend(str(tmp_path))
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"Prompt number {i}.\n" for i in range(6)))
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, prompts, out, "--method", "python:always_broken:SOMETIMES",
                    "--param", "fail_on=1,2,3,4,5,6") == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specrej")]
    # one line per failed prompt as it fails, then the one that stops the run
    assert [line.split(" failed:")[0] for line in lines[:3]] == [f"specrej: prompt {i}" for i in range(3)], lines
    assert len(lines) == 4 and "on each of the first 3 prompts; stopping" in lines[3], lines
    assert len(read_records(out)) == 3  # the three error records are kept; prompts 4-6 never ran


def test_python_api_runs_a_method_object(generator_dir):
    from specrej.api import load_engine, run_one
    from specrej.engine.sampling import SamplingParams
    from specrej.rewards.reward import LogProbReward

    engine = load_engine(str(generator_dir), dtype="float32", device="cpu")
    method = get_method("sr-random")
    assert isinstance(method, Method)
    result = run_one(engine, LogProbReward(), "List three fruits.", method=method, alpha=0.5, batch_size=8, seed=1,
                     sampling=SamplingParams(max_new_tokens=8), memory_budget=2**20)
    assert result.method == "sr-random" and result.params["rejection"] == {"rule": "random", "alpha": 0.5, "seed": 1}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
