"""Best-of-N and Speculative Rejection on the tiny generator."""

import math
import warnings

import pytest
import torch

from specrej import (CallableReward, LogProbReward, SamplingParams, SpecrejError, best_of_n, load_reward,
                     speculative_rejection)
from specrej.budget import token_capacity
from specrej.selection import num_kept

PROMPT = "Write a poem about the sea."
SAMPLING = SamplingParams(max_new_tokens=24)
BIG = 2**30


def texts(result):
    return [c.text for c in result.candidates]


def test_alpha_zero_with_b_init_n_is_best_of_n(engine):
    reward = load_reward("python:toy_rewards:letter_e")
    bon = best_of_n(engine, reward, PROMPT, n=12, batch_size=12, memory_budget=BIG, sampling=SAMPLING, seed=3)
    sr = speculative_rejection(engine, reward, PROMPT, alpha=0.0, init_batch_size=12, memory_budget=BIG,
                               sampling=SAMPLING, seed=3, decision_tokens=[4, 8, 16])
    assert len(sr.rounds) >= 1 and all(r.batch_after == r.batch_before for r in sr.rounds)
    assert texts(sr) == texts(bon)
    assert sr.best.id == bon.best.id and sr.best.final_score == bon.best.final_score


def test_best_of_n_returns_the_highest_scoring_complete_response(engine):
    result = best_of_n(engine, load_reward("python:toy_rewards:length"), PROMPT, n=10, batch_size=4,
                       memory_budget=BIG, sampling=SAMPLING)
    assert len(result.candidates) == 10 and all(c.complete for c in result.candidates)
    assert result.best.final_score == max(len(c.text) for c in result.candidates)
    assert result.tokens["generated"] >= sum(c.num_tokens for c in result.candidates)


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.5, 0.9])
def test_rounds_keep_ceil_one_minus_alpha_and_stay_within_budget(engine, alpha):
    prompt_len = len(engine.encode_prompt(PROMPT))
    budget = engine.kv_bytes_per_token * (prompt_len + 600)
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=alpha,
                                   memory_budget=budget, sampling=SAMPLING, min_tokens=4)
    capacity = token_capacity(budget, engine.kv_bytes_per_token, prompt_len, len(engine.layers))
    assert result.params["init_batch_size"] == capacity // 4
    assert result.rounds, "a budget this small must force decisions"
    for number, r in enumerate(result.rounds):
        assert r.kept == num_kept(r.ranked, alpha)
        assert r.batch_after * (r.decision_token + 1) <= capacity  # survivors fit one more token
        halted = [c for c in result.candidates if c.halted_round == number]
        assert len(halted) == r.ranked - r.kept + r.memory_guard_halted
        # the alpha cut halts scores at or below the cutoff; only the memory guard halts better ones
        assert sum(c.round_scores[-1] > r.cutoff for c in halted) <= r.memory_guard_halted
    assert result.rounds[0].decision_token >= 4  # min_tokens before the first rejection
    if alpha == 0.05:  # halting 5% frees too little memory: the guard must halt more
        assert any(r.memory_guard_halted for r in result.rounds)
    assert 0 < result.peak_kv_bytes <= budget
    assert result.best is not None and result.best.halted_round is None and result.best.complete


def test_decisions_at_scheduled_tokens_record_every_score(engine):
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=0.5,
                                   init_batch_size=16, memory_budget=BIG, sampling=SAMPLING,
                                   decision_tokens=[4, 8])
    assert [r.decision_token for r in result.rounds] == [4, 8]
    assert [r.batch_before for r in result.rounds][0] <= 16
    for c in result.candidates:
        rounds_in = len(result.rounds) if c.halted_round is None else c.halted_round + 1
        assert len(c.round_scores) == rounds_in


def test_logprob_reward_equals_an_independent_forward_pass(engine):
    result = best_of_n(engine, LogProbReward(), PROMPT, n=3, memory_budget=BIG, sampling=SAMPLING, seed=1)
    prompt_ids = engine.encode_prompt(PROMPT)
    for c in result.candidates:
        ids = torch.tensor([prompt_ids + c.token_ids])
        with torch.no_grad():
            logprobs = engine.model(ids).logits[0].float().log_softmax(-1)
        positions = range(len(prompt_ids) - 1, len(prompt_ids) - 1 + c.num_tokens)
        expected = sum(logprobs[p, t].item() for p, t in zip(positions, c.token_ids)) / c.num_tokens
        assert c.final_score == pytest.approx(expected, abs=1e-4)


def test_nan_scores_count_as_minus_inf_with_one_warning(engine):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = best_of_n(engine, load_reward("python:toy_rewards:broken"), PROMPT, n=6, memory_budget=BIG,
                           sampling=SAMPLING)
    nan_warnings = [w for w in caught if "NaN/inf" in str(w.message)]
    assert len(nan_warnings) == 1 and PROMPT[:20] in str(nan_warnings[0].message)
    assert sorted(c.final_score for c in result.candidates) == [-math.inf] * 3 + [1.0] * 3


def test_bad_arguments_are_refused(engine):
    reward = LogProbReward()
    with pytest.raises(SpecrejError, match="alpha"):
        speculative_rejection(engine, reward, PROMPT, alpha=1.0, memory_budget=BIG)
    with pytest.raises(SpecrejError, match="n must be"):
        best_of_n(engine, reward, PROMPT, n=0, memory_budget=BIG)
    with pytest.raises(SpecrejError, match="empty prompt"):
        best_of_n(engine, reward, "  ", n=2, memory_budget=BIG)
    with pytest.raises(SpecrejError, match="context"):
        best_of_n(engine, reward, "sea " * 300, n=2, memory_budget=BIG)
    with pytest.raises(SpecrejError, match="memory budget"):
        best_of_n(engine, reward, PROMPT, n=2, memory_budget=1000, sampling=SAMPLING)
    with pytest.raises(SpecrejError, match="does not fit"):
        best_of_n(engine, reward, PROMPT, n=64, batch_size=64, memory_budget=engine.kv_bytes_per_token * 500,
                  sampling=SAMPLING)


def test_callable_reward_must_return_one_score_per_response():
    reward = CallableReward(lambda prompt, responses: [1.0], name="short")
    from specrej import Response

    with pytest.raises(SpecrejError, match="1 scores for 2"):
        reward.score("p", [Response("a"), Response("b")])
