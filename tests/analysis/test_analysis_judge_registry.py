"""analysis.judge_registry: judge names, ``auto``, and the deterministic offline judge (standard library only)."""

import functools
import subprocess
import sys

import pytest

from analysis.judge_registry import (
    KEY_VARIABLES,
    JudgeUnavailable,
    api_key_present,
    judge_availability,
    judge_name,
    longest_judge,
    resolve_judge,
)


@pytest.fixture
def no_api_key(monkeypatch):
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_longest_judge_compares_stripped_lengths():
    assert longest_judge("q", "abc", "de") == 1.0  # 3 > 2: the first shown wins
    assert longest_judge("q", " a  ", "bb") == 2.0  # "a" (1) < "bb" (2) once stripped
    assert longest_judge("q", "xy", "yx") == 1.5  # equal lengths: a draw
    assert longest_judge("q", "", "   ") == 1.5


def test_api_key_present_reads_each_variable(monkeypatch, no_api_key):
    assert not api_key_present()
    monkeypatch.setenv("OPENAI_API_KEY", "")  # set but empty: no credentials
    assert not api_key_present()
    monkeypatch.setenv("OPENAI_CLIENT_CONFIG_PATH", "/etc/openai.yaml")
    assert api_key_present()


def test_resolve_judge_names(no_api_key):
    def mine(instruction, output_a, output_b):
        return 1.0

    assert resolve_judge(mine) is mine
    assert resolve_judge("longest") == "longest"
    assert resolve_judge("local:/models/judge") == "local:/models/judge"
    with pytest.raises(JudgeUnavailable, match="no judge configured"):
        resolve_judge(None)
    with pytest.raises(ValueError, match="unknown judge 'local:'"):
        resolve_judge("local:")  # a prefix without a model


def test_judge_name_for_names_and_callables():
    assert judge_name("local:default") == "local:default"
    assert judge_name(longest_judge) == "python:longest_judge"
    assert judge_name(lambda i, a, b: 1.0) == "python:<lambda>"
    assert judge_name(functools.partial(longest_judge, "q")) == "python:partial"  # no __name__: the type's


def test_registry_imports_neither_torch_nor_alpaca_eval():
    """The workflow imports it when it plans its jobs: it must stay light."""
    code = ("import sys\nimport analysis.judge_registry\n"
            "print(sorted(m for m in ('torch', 'alpaca_eval') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_judge_availability_names_what_the_judge_lacks(monkeypatch, no_api_key):
    """The win-rate job's parameter: it changes once a missing piece arrives, so the job reruns."""
    import importlib.util

    installed = {"alpaca_eval": None}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: installed.get(name, object()))
    assert judge_availability(None) == "no judge"
    assert judge_availability("auto") == "alpaca_eval missing"
    assert judge_availability("gpt4_turbo") == "alpaca_eval missing, OpenAI key not set"
    installed["alpaca_eval"] = object()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert judge_availability("gpt4_turbo") == "alpaca_eval installed, OpenAI key set"
    assert judge_availability("local:default") == "alpaca_eval installed"  # a key is no local judge's need
