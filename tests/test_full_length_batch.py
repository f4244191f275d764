"""One rule for a batch of full-length responses (Best-of-N's batches, Pandora's rounds, DeepConf's
batches): the given size, else as many as the budget holds; a given size that does not fit is one
message naming the option that sets it."""

from __future__ import annotations

import pytest

from specrej import SamplingParams, load_reward
from specrej.api import run_one
from specrej.errors import SpecrejError
from specrej.methods.session import Session

PROMPT = "Name three colours."
SAMPLING = SamplingParams(max_new_tokens=12)
BUDGET = 100_000  # bytes of KV: a few full-length rows of the tiny model beside the prompt


@pytest.mark.parametrize("method, params, option", [
    ("bon", {"n": 64}, "the batch size"),
    ("pandora", {"n": 64, "cost": 0.01, "min_open": 6, "reward_scale": 10}, "--param round_size"),
    ("deepconf", {"n": 64, "n_init": 16}, "--batch-size"),
])
def test_a_batch_that_does_not_fit_is_refused_naming_its_option(engine, method, params, option):
    reward = load_reward("python:toy_rewards:length")
    fits = Session(engine, reward, PROMPT, SAMPLING, seed=0, memory_budget=BUDGET).rows_that_fit(12)
    assert 1 <= fits < 16
    size = {"pandora": "round_size"}.get(method, "batch_size")
    with pytest.raises(SpecrejError) as error:
        run_one(engine, reward, PROMPT, method=method, **params, **{size: fits + 1}, memory_budget=BUDGET,
                sampling=SAMPLING)
    noun = "round" if method == "pandora" else "batch"
    assert str(error.value) == (f"a {noun} of {fits + 1} x 12 tokens does not fit the memory budget ({fits} rows "
                                f"fit); lower {option} or raise the budget")


def test_best_of_n_without_a_batch_size_takes_as_many_rows_as_fit(engine):
    reward = load_reward("python:toy_rewards:length")
    fits = Session(engine, reward, PROMPT, SAMPLING, seed=0, memory_budget=BUDGET).rows_that_fit(12)
    result = run_one(engine, reward, PROMPT, method="bon", n=fits + 2, memory_budget=BUDGET, sampling=SAMPLING)
    assert result.params["batch_size"] == fits and len(result.candidates) == fits + 2
    small = run_one(engine, reward, PROMPT, method="bon", n=2, memory_budget=BUDGET, sampling=SAMPLING)
    assert small.params["batch_size"] == 2  # at most n
