"""analysis.winrate (with analysis.judge_registry and analysis.alpaca_eval_adapter): WR / LC-WR through
alpaca_eval with offline judges (no network, no API key)."""

import json
import logging
import math
import random
import re
import socket
import subprocess
import sys

import pandas as pd
import pytest

from analysis import winrate as wr
from analysis.alpaca_eval_adapter import alpaca_eval_available
from analysis.judge_registry import KEY_VARIABLES, JudgeUnavailable, resolve_judge
from analysis.tables import table1_win_rates, write_table1

needs_alpaca_eval = pytest.mark.skipif(
    not alpaca_eval_available(), reason="alpaca_eval not installed (pip install -e '.[eval]')"
)


def outputs(texts, generator, prefix="Question"):
    return [{"instruction": f"{prefix} {i}?", "output": text, "generator": generator, "prompt_id": str(i)}
            for i, text in enumerate(texts)]


def prefers_good(instruction, output_a, output_b):
    """A content judge: the output containing GOOD wins (independent of length)."""
    a, b = "GOOD" in output_a, "GOOD" in output_b
    return 1.0 if a and not b else 2.0 if b and not a else 1.5


def no_api_key(monkeypatch):
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection (e.g. a Hugging Face hub download) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# ------------------------------------------------------------------------- without alpaca_eval
def test_module_imports_without_torch_or_alpaca_eval_and_names_the_install():
    code = (
        "import sys; sys.modules['alpaca_eval'] = None\n"
        "import analysis.winrate as wr, analysis.tables\n"
        "from analysis.judge_registry import JudgeUnavailable\n"
        "assert 'torch' not in sys.modules, 'analysis.winrate imported torch'\n"
        "try:\n"
        "    wr.winrate([{'instruction': 'q', 'output': 'a'}], [{'instruction': 'q', 'output': 'b'}],\n"
        "               judge='longest')\n"
        "except JudgeUnavailable as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install -e '.[eval]'" in result.stdout


def test_auto_is_the_local_judge_and_the_paid_judge_runs_only_when_named(monkeypatch):
    no_api_key(monkeypatch)
    assert resolve_judge("auto") == "local:default"
    assert resolve_judge("local") == "local:default"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a key that happens to be set changes nothing...
    assert resolve_judge("auto") == "local:default"
    assert resolve_judge("gpt4_turbo") == "gpt4_turbo"  # ...the paid judge is named
    with pytest.raises(ValueError, match="unknown judge"):
        resolve_judge("gpt5")


def test_gpt4_turbo_without_a_key_is_a_clear_error(monkeypatch):
    no_api_key(monkeypatch)
    with pytest.raises(JudgeUnavailable, match="gpt4_turbo.*OPENAI_API_KEY"):
        wr.winrate(outputs(["a"], "m"), outputs(["b"], "r"), judge="gpt4_turbo")


def test_no_judge_gives_a_not_evaluated_table(monkeypatch):
    no_api_key(monkeypatch)
    runs = {"Bo4": records("bon", 4, ["x", "y"]), "SR α=0.5": records("sr", 16, ["xx", "yy"], alpha=0.5)}
    inputs = wr.table1_or_not_evaluated(runs, judge="gpt4_turbo")
    assert inputs["note"].str.startswith("not evaluated:").all()
    assert inputs["note"].str.contains("OPENAI_API_KEY").all()
    assert inputs["win_rate"].isna().all()
    table = table1_win_rates(inputs)
    assert table.index.tolist() == ["Bo4", "SR α=0.5"] and table.isna().all(axis=None)
    assert wr.not_evaluated_table("no judge")["note"].tolist() == ["not evaluated: no judge"]
    unconfigured = wr.table1_or_not_evaluated(runs, judge=None)  # the workflow's `evaluation.judge: null`
    assert (unconfigured["note"] == "not evaluated: no judge configured").all()


# ------------------------------------------------------------------------------ with alpaca_eval
@needs_alpaca_eval
def test_longest_judge_gives_known_win_rates_per_pair(no_network):
    # 12 pairs where the model is longer, 5 where it is shorter, 3 of equal length: WR = (12 + 3/2) / 20
    model = ["long answer " * 3] * 12 + ["no"] * 5 + ["abc"] * 3
    reference = ["short"] * 12 + ["a longer reference"] * 5 + ["xyz"] * 3
    result = wr.winrate(outputs(model, "SR"), outputs(reference, "Bo4"), judge="longest")
    summary = result.summary
    assert summary["win_rate"] == pytest.approx(67.5)
    assert (summary["n"], summary["n_unparsed"], summary["n_wins"], summary["n_wins_base"], summary["n_draws"]) \
        == (20, 0, 12, 5, 3)
    assert summary["judge"] == "longest" and summary["annotator"] == "offline_pairwise"
    by_prompt = result.annotations.set_index("prompt_id")["preference"].astype(float)
    expected = [2.0] * 12 + [1.0] * 5 + [1.5] * 3
    assert by_prompt.loc[[str(i) for i in range(20)]].tolist() == expected
    assert (result.annotations["generator_1"] == "Bo4").all() and (result.annotations["generator_2"] == "SR").all()


@needs_alpaca_eval
def test_output_order_is_randomised_and_undone(no_network):
    shown_first = {}

    def judge(instruction, output_a, output_b):
        shown_first[instruction] = "model" if output_a.startswith("model") else "reference"
        return prefers_good(instruction, output_a, output_b)

    model = [("model GOOD " if i % 3 else "model ") + "x" * i for i in range(30)]
    reference = [("reference GOOD " if i % 3 == 0 else "reference ") + "y" * i for i in range(30)]
    result = wr.winrate(outputs(model, "SR"), outputs(reference, "Bo4"), judge=judge)
    assert set(shown_first.values()) == {"model", "reference"}  # alpaca_eval did switch some pairs
    by_prompt = result.annotations.set_index("prompt_id")["preference"].astype(float)
    assert all(by_prompt[str(i)] == (2.0 if i % 3 else 1.0) for i in range(30))
    assert result.summary["win_rate"] == pytest.approx(200 / 3)


@needs_alpaca_eval
def test_position_biased_judge_lands_near_50(no_network):
    model, reference = [f"m{'x' * (i % 7)}" for i in range(40)], [f"r{'y' * (i % 5)}" for i in range(40)]
    result = wr.winrate(outputs(model, "SR"), outputs(reference, "Bo4"), judge=lambda i, a, b: 1.0)
    assert 25 < result.summary["win_rate"] < 75  # always "first shown": only the random order decides
    assert set(result.annotations["preference"]) == {1.0, 2.0}


@needs_alpaca_eval
def test_equal_length_differences_leave_lc_undefined(no_network):
    summary = wr.winrate(outputs(["GOOD"] * 8, "SR"), outputs(["bad!"] * 8, "Bo4"), judge=prefers_good).summary
    assert summary["win_rate"] == 100.0 and math.isnan(summary["lc_win_rate"])
    assert "same length difference" in summary["lc_note"]


@needs_alpaca_eval
def test_unparseable_verdicts_are_counted_not_scored(no_network):
    def judge(instruction, output_a, output_b):
        return None if instruction.endswith(("0?", "5?")) else prefers_good(instruction, output_a, output_b)

    result = wr.winrate(outputs(["GOOD"] * 10, "SR"), outputs(["bad"] * 10, "Bo4"), judge=judge)
    assert (result.summary["n_pairs"], result.summary["n"], result.summary["n_unparsed"]) == (10, 8, 2)
    assert result.summary["win_rate"] == 100.0
    assert result.annotations["preference"].isna().sum() == 2


@needs_alpaca_eval
def test_length_controlled_win_rate_is_computed_offline(no_network):
    rng = random.Random(0)
    model = [("GOOD " if i % 3 else "") + "x" * rng.randint(5, 60) for i in range(40)]
    reference = [("GOOD " if i % 3 == 0 else "") + "y" * rng.randint(5, 60) for i in range(40)]
    forward = wr.winrate(outputs(model, "SR"), outputs(reference, "Bo4"), judge=prefers_good).summary
    backward = wr.winrate(outputs(reference, "Bo4"), outputs(model, "SR"), judge=prefers_good).summary
    assert forward["win_rate"] == pytest.approx(65.0) and forward["glm"] == "length_controlled_minimal"
    assert 0 < forward["lc_win_rate"] < 100 and forward["lc_note"] == ""
    # the minimal GLM is antisymmetric: swapping model and reference mirrors LC-WR around 50
    assert forward["lc_win_rate"] + backward["lc_win_rate"] == pytest.approx(100, abs=1e-6)


@needs_alpaca_eval
def test_length_controlled_win_rate_needs_five_verdicts(no_network):
    summary = wr.winrate(outputs(["GOOD", "GOOD!"] * 2, "SR"), outputs(["bad"] * 4, "Bo4"), judge=prefers_good).summary
    assert summary["win_rate"] == 100.0 and math.isnan(summary["lc_win_rate"])
    assert "needs >= 5" in summary["lc_note"]


@needs_alpaca_eval
def test_gpt4_turbo_path_runs_through_alpaca_eval_config(monkeypatch, no_network):
    """The API judge's own config, prompt and log-prob parser, with OpenAI replaced by a fake."""
    from alpaca_eval.decoders import openai as alpaca_openai

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    calls = []

    def fake_openai_completions(prompts, model_name, **kwargs):
        calls.append(model_name)
        entries = []
        for prompt in prompts:
            shown = dict(re.findall(r'"model_identifier": "(m|M)",\s*"output": """(.*?)"""', prompt, re.DOTALL))
            winner = "m" if "GOOD" in shown["m"] else "M"
            top = [{"token": winner, "logprob": -0.01}, {"token": "m" if winner == "M" else "M", "logprob": -4.6}]
            entries.append({"logprobs": {"content": [{"token": winner, "logprob": -0.01, "top_logprobs": top}]}})
        return {"completions": [e["logprobs"]["content"][0]["token"] for e in entries], "completions_all": entries}

    monkeypatch.setattr(alpaca_openai, "openai_completions", fake_openai_completions)
    result = wr.winrate(outputs(["GOOD answer"] * 6, "SR"), outputs(["answer"] * 6, "Bo4"), judge="gpt4_turbo")
    assert result.summary["judge"] == "gpt4_turbo"
    assert result.summary["annotator"] == "weighted_alpaca_eval_gpt4_turbo"
    assert set(calls) == {"gpt-4-1106-preview"}
    # weighted verdicts, unswitched: preference = 1 + p(winner) for every pair, wherever the model was shown
    p_winner = math.exp(-0.01) / (math.exp(-0.01) + math.exp(-4.6))
    assert result.summary["win_rate"] == pytest.approx(100 * p_winner) and result.summary["n"] == 6


def records(method, n, texts, alpha=None, model="gen-A", reward="rm", failed=()):
    params = {"model": model, "reward": reward, "seed": 0, "n" if method == "bon" else "init_batch_size": n}
    if alpha is not None:
        params["alpha"] = alpha
    setting = {"n": n} if method == "bon" else {"alpha": alpha}
    label = f"Bo{n}" if method == "bon" else f"SR α={alpha:g}"
    params["setting"] = {"method": method, "params": setting, "label": label}  # no display: the fallback reference
    out = []
    for i, text in enumerate(texts):
        record = {"prompt_id": i, "prompt": f"Prompt {i}?", "method": method, "params": params}
        if i in failed:
            record["error"] = "too long"
        else:
            record["best"] = {"candidate_id": 0, "text": text, "score": 0.0, "num_tokens": len(text.split())}
        out.append(record)
    return out


@needs_alpaca_eval
def test_table1_inputs_judges_every_method_against_bo_n_min(tmp_path, no_network):
    texts = {"short": ["s"] * 6, "long": ["much longer"] * 6, "mixed": ["much longer"] * 3 + ["s"] * 3}
    runs = {}
    for model in ("gen-A", "gen-B"):
        for label, recs in wr.group_by_method([
            *records("bon", 4, texts["short"], model=model),
            *records("bon", 16, texts["mixed"], model=model),
            *records("sr", 64, texts["long"], alpha=0.5, model=model, failed=(5,)),
        ]).items():
            runs.setdefault(label, []).extend(recs)
    assert list(runs) == ["Bo4", "Bo16", "SR α=0.5"] and wr.bon_min_label(runs) == "Bo4"
    inputs = wr.table1_inputs(runs, judge="longest", annotations_dir=tmp_path / "annotations")
    assert inputs.columns.tolist() == wr.TABLE1_INPUT_COLUMNS
    assert len(inputs) == 6 and (inputs["judge"] == "longest").all() and (inputs["reference_label"] == "Bo4").all()
    a = inputs[inputs["generator"] == "gen-A"].set_index("method_label")
    assert a.loc["Bo4", ["win_rate", "lc_win_rate"]].tolist() == [50.0, 50.0]
    assert a.loc["Bo16", "win_rate"] == pytest.approx(75.0)  # 3 wins, 3 draws
    assert a.loc["SR α=0.5", "win_rate"] == 100.0 and a.loc["SR α=0.5", "n"] == 5  # the failed prompt is left out
    table = table1_win_rates(inputs)
    assert table.loc["SR α=0.5", "Average WR"] == 100.0 and table.loc["Bo4", "gen-B WR"] == 50.0
    written = write_table1(inputs, tmp_path / "table1")
    assert all(path.exists() for path in written)
    assert "Judge: longest" in (tmp_path / "table1.md").read_text()
    saved = sorted(p.name for p in (tmp_path / "annotations").iterdir())
    assert len(saved) == 4 and json.loads((tmp_path / "annotations" / saved[0]).read_text())[0]["judge"] == "longest"


def write_runs(folder, runs):
    """Each {name: records} as folder/<name>.jsonl; returns the paths."""
    paths = []
    for name, recs in runs.items():
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        paths.append(path)
    return paths


@needs_alpaca_eval
def test_table1_from_files_leaves_a_prompt_failed_anywhere_out_of_every_method(tmp_path, no_network):
    texts = ["s"] * 3 + ["much longer"] * 3
    files = {}
    for model, label in (("models/a", "Gen A"), ("models/b", "Gen B")):
        folder = tmp_path / label.replace(" ", "")
        folder.mkdir()
        files[label] = write_runs(folder, {
            "bo4": records("bon", 4, ["s"] * 6, model=model),
            "bo8": records("bon", 8, texts, model=model),
            "sr": records("sr", 16, ["much longer"] * 6, alpha=0.5, model=model, failed=(0,)),
        })
    inputs = wr.table1_from_files(files, judge="longest", annotations_dir=tmp_path / "annotations")
    assert inputs.columns.tolist() == wr.TABLE1_INPUT_COLUMNS
    assert inputs["generator"].unique().tolist() == ["Gen A", "Gen B"]  # the given labels, not params.model
    assert (inputs["n"] == 5).all()  # prompt 0 failed in SR only, and is left out of Bo4 and Bo8 too
    a = inputs[inputs["generator"] == "Gen A"].set_index("method_label")
    assert a.loc["Bo4", "win_rate"] == 50.0 and a.loc["SR α=0.5", "win_rate"] == 100.0
    assert a.loc["Bo8", "win_rate"] == pytest.approx(100 * (3 + 2 / 2) / 5)  # 3 wins, 2 draws of the 5 left
    assert sorted(p.name for p in (tmp_path / "annotations").iterdir()) == ["Gen_A", "Gen_B"]

    inputs.to_csv(tmp_path / "win_rates.csv", index=False)  # the workflow passes it on as CSV
    write_table1(pd.read_csv(tmp_path / "win_rates.csv"), tmp_path / "table1")
    table = pd.read_csv(tmp_path / "table1.csv", index_col=0)
    assert table.loc["SR α=0.5", "status"].startswith("evaluated by longest")
    assert table.loc["Bo4", "status"] == "reference: 50 by definition, not judged"
    assert "% Judge: longest" in (tmp_path / "table1.tex").read_text()


def test_table1_from_files_without_a_judge_is_not_evaluated(tmp_path, monkeypatch):
    no_api_key(monkeypatch)
    paths = write_runs(tmp_path, {"bo4": records("bon", 4, ["a", "b"]),
                                  "sr": records("sr", 8, ["c", "d"], alpha=0.5)})
    for judge, reason in ((None, "no judge configured"), ("gpt4_turbo", "OPENAI_API_KEY")):
        inputs = wr.table1_from_files({"Gen A": paths}, judge=judge)
        assert inputs[["generator", "method_label"]].values.tolist() == [["Gen A", "Bo4"], ["Gen A", "SR α=0.5"]]
        assert inputs["win_rate"].isna().all() and inputs["note"].str.startswith("not evaluated:").all()
        assert reason in inputs.attrs["status"]
    inputs.to_csv(tmp_path / "win_rates.csv", index=False)
    write_table1(pd.read_csv(tmp_path / "win_rates.csv"), tmp_path / "table1")  # attrs are lost in the CSV
    assert "**not evaluated: judge 'gpt4_turbo' needs" in (tmp_path / "table1.md").read_text()
    table = pd.read_csv(tmp_path / "table1.csv", index_col=0)
    assert table["status"].str.startswith("not evaluated: judge 'gpt4_turbo'").all()


def test_both_table1_entry_points_share_one_not_evaluated_path(tmp_path, monkeypatch, caplog):
    """A judge that resolves but cannot run (here: alpaca_eval does not import) gives the same
    "not evaluated" cells, note, attrs and warning from the in-memory and the file entry points."""
    monkeypatch.setitem(sys.modules, "alpaca_eval.main", None)
    bon, sr = records("bon", 4, ["a", "b"]), records("sr", 8, ["c", "d"], alpha=0.5)
    from_runs = wr.table1_or_not_evaluated({"Bo4": bon, "SR α=0.5": sr}, judge="longest")
    from_files = wr.table1_from_files({"gen-A": write_runs(tmp_path, {"bo4": bon, "sr": sr})}, judge="longest")
    for inputs in (from_runs, from_files):
        assert inputs.columns.tolist() == wr.TABLE1_INPUT_COLUMNS
        assert inputs[["generator", "method_label"]].values.tolist() == [["gen-A", "Bo4"], ["gen-A", "SR α=0.5"]]
        assert inputs["note"].str.startswith("not evaluated: alpaca_eval cannot be imported").all()
        assert inputs.attrs["status"] == inputs["note"].iloc[0] and inputs["win_rate"].isna().all()
    pd.testing.assert_frame_equal(from_runs, from_files)
    warnings = [r for r in caplog.records if r.name == "analysis.winrate" and r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(r.getMessage().startswith("Table 1 not evaluated:") for r in warnings)


@needs_alpaca_eval
def test_generators_with_several_rewards_get_one_row_each(no_network):
    runs = wr.group_by_method([
        *records("bon", 4, ["s"] * 5, reward="rm1"), *records("bon", 4, ["s"] * 5, reward="rm2"),
        *records("sr", 8, ["long"] * 5, alpha=0.5, reward="rm1"),
        *records("sr", 8, ["long"] * 5, alpha=0.5, reward="rm2"),
    ])
    inputs = wr.table1_inputs(runs, judge="longest")
    assert sorted(inputs["generator"].unique()) == ["gen-A / rm1", "gen-A / rm2"]
    table1_win_rates(inputs)  # one row per generator x method: pivot does not raise


# ------------------------------------------------------------------------------- local judge
def test_chatml_prompt_becomes_chat_messages():
    pytest.importorskip("torch")
    from specrej.rewards.judge import chatml_to_messages

    prompt = "<|im_start|>system\nBe fair.\n<|im_end|>\n<|im_start|>user\nWhich is better?\n<|im_end|>"
    assert chatml_to_messages(prompt) == [{"role": "system", "content": "Be fair."},
                                          {"role": "user", "content": "Which is better?"}]
    assert chatml_to_messages("plain") == [{"role": "user", "content": "plain"}]


@needs_alpaca_eval
def test_local_judge_runs_on_a_tiny_model(generator_dir, no_network):
    from specrej.rewards.judge import local_judge_completions

    completions = local_judge_completions(["<|im_start|>user\nPick 1 or 2.\n<|im_end|>"], model_name=str(generator_dir),
                                          top_logprobs=400)
    tokens = [t["token"] for t in completions["completions_all"][0]["logprobs"]["content"][0]["top_logprobs"]]
    assert "1" in tokens and "2" in tokens and len(tokens) == len(set(tokens))
    result = wr.winrate(outputs(["GOOD"] * 5, "SR"), outputs(["bad"] * 5, "Bo4"), judge=f"local:{generator_dir}")
    summary = result.summary
    assert summary["judge"] == f"local:{generator_dir}" and summary["annotator"] == "local_pairwise"
    assert summary["n"] + summary["n_unparsed"] == summary["n_pairs"] == 5


@needs_alpaca_eval
def test_local_judge_that_cannot_load_is_unavailable(tmp_path):
    inputs = wr.table1_or_not_evaluated(
        {"Bo4": records("bon", 4, ["a"] * 2), "Bo8": records("bon", 8, ["b"] * 2)}, judge=f"local:{tmp_path}/missing"
    )
    assert inputs["note"].str.startswith("not evaluated: judge 'local:").all()


@pytest.mark.slow
@needs_alpaca_eval
def test_local_default_model_judges_six_pairs(no_network):
    questions = ["What is the capital of France?", "Name a primary colour.", "Write a haiku about the sea.",
                 "What is 2 + 2?", "Give a synonym for happy.", "Translate 'hello' into Spanish."]
    good = ["The capital of France is Paris.", "Red is a primary colour.",
            "Waves fold into foam / the tide keeps ancient time / gulls argue above", "2 + 2 = 4.", "Joyful.", "Hola."]
    bad = ["I like turtles.", "Banana bread.", "The sea.", "5", "Sad.", "Bonjour."]
    model = [{"instruction": q, "output": o, "generator": "good"} for q, o in zip(questions, good, strict=True)]
    reference = [{"instruction": q, "output": o, "generator": "bad"} for q, o in zip(questions, bad, strict=True)]
    result = wr.winrate(model, reference, judge="local:default")
    summary = result.summary
    assert summary["judge"] == "local:default" and summary["n_pairs"] == 6
    assert summary["n"] + summary["n_unparsed"] == 6
    parsed = pd.to_numeric(result.annotations["preference"], errors="coerce").dropna()
    assert parsed.between(1, 2).all()
    assert 0 <= summary["win_rate"] <= 100
    if summary["n"] >= 5:
        assert 0 <= summary["lc_win_rate"] <= 100


@needs_alpaca_eval
def test_a_setting_that_answered_no_prompt_is_a_row_of_its_own_and_leaves_the_others_judged(tmp_path, no_network):
    """SR α=0.9 completed no response on any of the 6 prompts; SR α=0.5 failed on prompt 0
    only. Bo8 and SR α=0.5 are judged on prompts 1-5 (prompt 0 left out), not on none."""
    texts = ["s"] * 3 + ["much longer"] * 3
    silent = records("sr", 16, ["x"] * 6, alpha=0.9, failed=range(6))
    for record in silent:
        record["error"] = "no complete response: every candidate was halted"
    files = {"Gen A": write_runs(tmp_path, {
        "bo4": records("bon", 4, ["s"] * 6), "bo8": records("bon", 8, texts),
        "sr": records("sr", 16, ["much longer"] * 6, alpha=0.5, failed=(0,)), "silent": silent})}
    inputs = wr.table1_from_files(files, judge="longest").set_index("method_label")
    assert inputs.loc["SR α=0.9", "note"] == "no complete response on any prompt" and inputs.loc["SR α=0.9", "n"] == 0
    assert inputs.loc[["Bo4", "Bo8", "SR α=0.5"], "n"].tolist() == [5, 5, 5]
    assert inputs.loc["Bo8", "win_rate"] == pytest.approx(100 * (3 + 2 / 2) / 5)  # 3 wins, 2 draws of the 5
