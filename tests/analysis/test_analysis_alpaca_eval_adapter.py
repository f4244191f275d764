"""analysis.alpaca_eval_adapter: annotator configs, the Python judges' completions, and the
missing-install path (none of these tests needs alpaca_eval installed)."""

import logging
import math
import sys

import pytest

from analysis import alpaca_eval_adapter as adapter
from analysis.judge_registry import JudgeUnavailable


@pytest.fixture
def alpaca_eval_missing(monkeypatch):
    """``import alpaca_eval.main`` fails, whether or not alpaca_eval is installed."""
    monkeypatch.setitem(sys.modules, "alpaca_eval.main", None)


def prompt(instruction, output_1, output_2):
    """The offline_pairwise template (analysis/judges/offline_pairwise/prompt.txt) filled in."""
    return (f"<<<specrej:instruction>>>{instruction}<<<specrej:output_1>>>{output_1}"
            f"<<<specrej:output_2>>>{output_2}<<<specrej:end>>>")


def top_logprobs(completion):
    return {t["token"]: t["logprob"] for t in completion["logprobs"]["content"][0]["top_logprobs"]}


def test_api_judge_uses_alpaca_evals_own_config():
    assert adapter.annotator_setup("gpt4_turbo") == ("weighted_alpaca_eval_gpt4_turbo", {})


def test_longest_judge_answers_through_the_offline_config():
    config, kwargs = adapter.annotator_setup("longest")
    assert config == str(adapter.JUDGES_DIR / "offline_pairwise")
    out = kwargs["fn_completions"]([prompt("Q?", "a", "bb"), prompt("Q?", "ccc", "d"), prompt("Q?", "e", "f"),
                                    "no sentinels here"])
    # "bb" is longer: output 2 wins with certainty; "ccc": output 1; equal lengths: 1 and 2 at 1/2 each
    assert out["completions"] == ["2", "1", "1", ""]
    all_ = out["completions_all"]
    assert top_logprobs(all_[0]) == {"2": 0.0} and top_logprobs(all_[1]) == {"1": 0.0}
    assert top_logprobs(all_[2]) == pytest.approx({"1": math.log(0.5), "2": math.log(0.5)})
    assert top_logprobs(all_[3]) == {}  # no verdict: nothing for the parser, an unparsed annotation


def test_weighted_python_judge_becomes_log_probs():
    verdicts = {"a": 1.25, "b": None, "c": 2.5}  # keyed by instruction
    _, kwargs = adapter.annotator_setup(lambda instruction, first, second: verdicts[instruction])
    out = kwargs["fn_completions"]([prompt("a", "x", "y"), prompt("b", "x", "y"), prompt("c", "x", "y")])
    # 1.25: p(first better) = 2 - 1.25 = 0.75, p(second) = 0.25; the likelier token is the text
    assert out["completions"] == ["1", "", ""]  # None and 2.5 (outside [1, 2]) are no verdict
    assert top_logprobs(out["completions_all"][0]) == pytest.approx({"1": math.log(0.75), "2": math.log(0.25)})


def test_missing_alpaca_eval_names_the_install(alpaca_eval_missing):
    root = logging.getLogger()
    level = root.level
    with pytest.raises(JudgeUnavailable, match=r"pip install -e '\.\[eval\]'"):
        adapter.import_alpaca_eval()
    assert root.level == level  # the root logger's level is left as it was
    assert not adapter.alpaca_eval_available()
    with pytest.raises(JudgeUnavailable, match="alpaca_eval cannot be imported"):
        adapter.usable_judge("longest")


def test_usable_judge_resolves_the_name_first(alpaca_eval_missing):
    with pytest.raises(JudgeUnavailable, match="no judge configured"):
        adapter.usable_judge(None)  # before alpaca_eval is even tried
    with pytest.raises(ValueError, match="unknown judge"):
        adapter.usable_judge("gpt5")
