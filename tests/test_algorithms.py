"""Best-of-N and Speculative Rejection on the tiny generator."""

import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch

from specrej import (
    CallableReward,
    LogProbReward,
    SamplingParams,
    SpecrejError,
    best_of_n,
    load_reward,
    speculative_rejection,
)
from specrej.api import check_run, run_one
from specrej.engine.budget import token_capacity
from specrej.methods import get_method, sr
from specrej.methods.session import Session

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


def round_batch(result, r):
    """The candidates scored at round r and their scores: a live row's score at round r is
    round_scores[r]; a response completed since round r - 1 gets its final score there."""
    batch = [c for c in result.candidates if len(c.round_scores) > r]
    return batch, [c.round_scores[r] for c in batch]


class TokenCountReward:
    """A reward of the response's token count through `fn`: its ranking is known in advance."""

    def __init__(self, fn):
        self.name, self.fn = "token-count", fn

    def score(self, prompt, responses):
        return [float(self.fn(len(r.token_ids))) for r in responses]


def peak_at_8(n):
    """Rises up to 8 tokens, then falls: at a decision at token 8 every live row outscores the
    responses completed earlier (8 > n), yet every one of them ends below them (-n, n > 8)."""
    return n if n <= 8 else -n


def completed_by(c, round_) -> bool:
    """Whether c had completed when round_ was decided (a live row then had decision_token tokens)."""
    return c.complete and c.num_tokens < round_.decision_token


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.5, 0.9])
def test_rounds_cut_at_eq4_keep_eq5_and_stay_within_budget(engine, alpha):
    prompt_len = len(engine.encode_prompt(PROMPT))
    budget = engine.kv_bytes_per_token * (prompt_len + 600)
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=alpha,
                                   memory_budget=budget, sampling=SAMPLING, min_tokens=4)
    capacity = token_capacity(budget, engine.kv_bytes_per_token, prompt_len, len(engine.layers))
    assert result.params["init_batch_size"] == min(1000, capacity // 4)
    assert result.rounds, "a budget this small must force decisions"
    for r, round_ in enumerate(result.rounds):
        batch, scores = round_batch(result, r)
        # eq. 4 by hand: the alpha lower quantile is the ceil((1 - alpha) n)-th highest score
        assert round_.rule["cutoff"] == sorted(scores, reverse=True)[math.ceil((1 - alpha) * len(scores) - 1e-9) - 1]
        below = {c.id for c, s in zip(batch, scores) if s < round_.rule["cutoff"] and not completed_by(c, round_)}
        halted = {c.id: c.round_scores[r] for c in result.candidates if c.halted_round == r}
        guard = {i for i, s in halted.items() if s >= round_.rule["cutoff"]}
        assert below <= set(halted) and set(halted) - below == guard  # eq. 5 halts exactly the scores below r_cut
        assert len(guard) == round_.rule["memory_guard_halted"]
        going_on = [s for c, s in zip(batch, scores) if not completed_by(c, round_) and c.id not in halted]
        assert len(going_on) == round_.batch_after
        assert not guard or min(going_on) >= max(halted[i] for i in guard)  # the guard halts the lowest
        assert round_.batch_after * (round_.decision_token + 1) <= capacity  # survivors fit one more token
    assert result.rounds[0].decision_token >= 4  # min_tokens before the first rejection
    if alpha == 0.05:  # halting 5% frees too little memory: the guard must halt more
        assert any(r.rule["memory_guard_halted"] for r in result.rounds)
    assert 0 < result.peak_kv_bytes <= budget
    assert result.best.complete and result.best.final_score == max(c.final_score for c in result.finalists)


def test_a_response_completed_early_stays_a_finalist_and_wins(engine, monkeypatch):
    """Algorithm 1, line 7 and eq. 6: a completed response is in the final set for good, even
    when it scores below a later cut. Until the decision at token 8 many tokens stop a row; from
    the decision on none does, so every live row runs to 24 tokens. With `peak_at_8` the live
    rows (8 tokens) outscore every response completed before (< 8 tokens) at the cut, and end
    below all of them (-24)."""
    monkeypatch.setattr(engine, "stop_token_ids", torch.arange(0, 400, 16))
    rollouts, start = [], Session.start
    monkeypatch.setattr(Session, "start", lambda self, *args: rollouts.append(start(self, *args)) or rollouts[-1])

    class StopsEndAtTheDecision(TokenCountReward):
        def score(self, prompt, responses):
            for batch in rollouts:  # a rollout keeps the stop tokens it was made with
                batch.rollout.stop_token_ids = torch.tensor([], dtype=torch.long)
            return super().score(prompt, responses)

    result = speculative_rejection(engine, StopsEndAtTheDecision(peak_at_8), PROMPT, alpha=0.5, init_batch_size=32,
                                   memory_budget=BIG, sampling=SAMPLING, decision_tokens=[8])
    cut = result.rounds[0]
    early = [c for c in result.candidates if c.num_tokens < 8]
    assert early and cut.batch_before > len(early), "some rows must stop before token 8 and most run on"
    assert all(c.complete and c.final_score < cut.rule["cutoff"] for c in early)  # below the cut ...
    assert result.best.final_score == max(c.num_tokens for c in early)  # ... and the best of them wins
    assert result.best in early and result.best.halted_round is None


def test_ties_at_the_cutoff_are_all_kept_and_analysis_agrees(engine):
    from analysis.correlation import best_survives

    alpha = 0.7
    result = speculative_rejection(engine, TokenCountReward(lambda n: n // 4), PROMPT, alpha=alpha,
                                   init_batch_size=20, memory_budget=BIG, sampling=SAMPLING, decision_tokens=[5])
    batch, scores = round_batch(result, 0)
    cut = result.rounds[0]
    kept_by_hand = {c.id for c, s in zip(batch, scores) if s >= cut.rule["cutoff"]}
    assert cut.rule["accepted"] == len(kept_by_hand) > cut.rule["kept"] == math.ceil(0.3 * len(batch)), "ties must exist"
    live = {c.id for c in batch if not completed_by(c, cut)}
    assert {i for i in live if result.candidates[i].halted_round != 0} == kept_by_hand & live
    # the analysis' best-survives check runs the same rule: a tied candidate at the cutoff survives
    tied = next(c for c, s in zip(batch, scores) if s == cut.rule["cutoff"])
    final = np.array([1.0 if c.id == tied.id else 0.0 for c in batch])
    assert best_survives(np.array(scores), final, alpha)


def test_decisions_at_scheduled_tokens_record_every_score(engine):
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=0.5,
                                   init_batch_size=16, memory_budget=BIG, sampling=SAMPLING,
                                   decision_tokens=[4, 8])
    assert [r.decision_token for r in result.rounds] == [4, 8]
    completed_before = sum(completed_by(c, result.rounds[0]) for c in result.candidates)
    assert result.rounds[0].batch_before + completed_before == 16 == result.rounds[0].ranked
    for c in result.candidates:
        if c.halted_round is not None:
            assert len(c.round_scores) == c.halted_round + 1 and not c.complete
        elif c.round_scores and completed_by(c, result.rounds[len(c.round_scores) - 1]):
            assert c.round_scores[-1] == c.final_score  # scored once complete, in the next round's batch


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
    with pytest.raises(SpecrejError, match="--n must be"):
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


def with_cut(engine, reward, cut, **params):
    """SR's schedule on PROMPT with `cut` deciding each round (a method declared here)."""
    method = dataclasses.replace(get_method("sr"), run=lambda session, checked: sr.speculative_rejection(
        session, checked, cut))
    return run_one(engine, reward, PROMPT, method=method, **params)


def test_adaptive_cut_records_its_rule_and_delta_zero_is_best_of_n(engine):
    from specrej.methods.adaptive_cut import AdaptiveCut, PartialFit

    reward = load_reward("python:toy_rewards:letter_e")
    exact = {8: PartialFit(tau=8, slope=1.0, intercept=0.0, sigma=0.0, n=100)}  # partial predicts final exactly
    sharp = with_cut(engine, reward, AdaptiveCut(0.05, exact), alpha=0.5, batch_size=12, memory_budget=BIG,
                     sampling=SAMPLING, seed=3, decision_tokens=[8])
    batch, scores = round_batch(sharp, 0)
    live = [(c, s) for c, s in zip(batch, scores) if not completed_by(c, sharp.rounds[0])]
    top = max(s for _, s in live)
    # sigma = 0: only rows tied with the best live score can still win, so only they go on
    assert {c.id for c, _ in live if c.halted_round is None} == {c.id for c, s in live if s == top}
    assert sharp.rounds[0].rule["rule"] == "adaptive" and sharp.rounds[0].rule["source"] == "fit"
    assert sharp.params["rejection"] == {"rule": "adaptive", "delta": 0.05, "correction": "bonferroni",
                                         "fit": "study", "fallback_alpha": 0.5}
    bon = best_of_n(engine, reward, PROMPT, n=12, batch_size=12, memory_budget=BIG, sampling=SAMPLING, seed=3)
    never = with_cut(engine, reward, AdaptiveCut(0.0, exact), alpha=0.5, batch_size=12, memory_budget=BIG,
                     sampling=SAMPLING, seed=3, decision_tokens=[4, 8])
    assert texts(never) == texts(bon) and never.best.id == bon.best.id  # delta = 0 halts nothing: Best-of-N
    online = with_cut(engine, reward, AdaptiveCut(0.05), alpha=0.5, batch_size=12, memory_budget=BIG,
                      sampling=SAMPLING, seed=3, decision_tokens=[4, 8])
    assert online.rounds[0].rule["source"] == "fixed_alpha_fallback"  # no earlier round to estimate from


def test_one_alpha_check_for_the_api_the_cli_and_the_algorithm():
    assert check_run("sr", {"alpha": 0.0})[1].alpha == 0.0 and check_run("sr", {"alpha": 0.99})[1].alpha == 0.99
    for bad in (1.0, -0.1, None):
        with pytest.raises(SpecrejError, match=r"^--alpha (must be in \[0, 1\), got|is required for speculative rejection)"):
            check_run("sr", {"alpha": bad})


def test_non_finite_scores_count_as_minus_inf_with_one_warning():
    from specrej.rewards.reward import finite_scores

    reward = CallableReward(lambda prompt, texts: [], name="broken")
    with pytest.warns(UserWarning, match="reward broken gave NaN/inf scores for prompt 'p'; they count as -inf"):
        scores, nonfinite = finite_scores([1.0, math.nan, math.inf, -math.inf], reward, repr("p"))
    assert scores == [1.0, -math.inf, -math.inf, -math.inf] and nonfinite
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert finite_scores([math.nan], reward, "p", warn=False) == ([-math.inf], True)
        assert finite_scores([2.0], reward, "p") == ([2.0], False)
