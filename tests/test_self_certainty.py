"""The reward-free self-certainty score (`--reward self-certainty`): KL(U || p) of a small
distribution by hand and in float64, each token's value recomputed from transformers' logits,
partial and final scores as their means, SR / Best-of-N / Pandora under it, prefixes from the
record, a resume, and the hot path without it (no certainty computed, the fused draw kept)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from specrej import SamplingParams, load_reward
from specrej.api import run_one
from specrej.engine import sampler
from specrej.errors import SpecrejError
from specrej.rewards.prefixes import score_prefixes
from specrej.rewards.reward import Response, SelfCertaintyReward

PROMPT = "Write a poem about the sea."
SAMPLING = SamplingParams(max_new_tokens=10)
BIG = 2**30


def kl_uniform_to(probs) -> float:
    """KL(U || p) = sum_j (1/V) log((1/V) / p_j), in float64 from the probabilities themselves."""
    p = np.asarray(probs, dtype=np.float64)
    return float(np.sum(np.log((1 / p.size) / p)) / p.size)


def test_self_certainty_by_hand():
    # p = [1/2, 1/4, 1/8, 1/8]: (1/4) [ln(1/4 / 1/2) + ln(1/4 / 1/4) + 2 ln(1/4 / 1/8)]
    #   = (1/4) [-ln 2 + 0 + 2 ln 2] = ln 2 / 4 = 0.1732868
    logits = torch.log(torch.tensor([[4.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    assert sampler.self_certainty(logits).tolist() == pytest.approx([math.log(2) / 4, 0.0], abs=1e-6)
    assert kl_uniform_to([0.5, 0.25, 0.125, 0.125]) == pytest.approx(math.log(2) / 4, abs=1e-12)


def test_self_certainty_of_random_logits_against_float64():
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0)) * 4
    expected = [kl_uniform_to(row) for row in torch.softmax(logits.double(), -1).numpy()]
    assert sampler.self_certainty(logits).tolist() == pytest.approx(expected, abs=1e-5)
    # shifting the logits does not change the distribution, nor its self-certainty
    assert sampler.self_certainty(logits + 100).tolist() == pytest.approx(expected, abs=1e-4)


def test_each_tokens_certainty_recomputed_from_transformers_logits(engine):
    """A Best-of-N run under self-certainty: every token's certainty is KL(U || p) of the
    untempered distribution it was drawn from (transformers' forward over prompt + tokens, in
    float64), and each final score is their mean."""
    result = run_one(engine, load_reward("self-certainty"), PROMPT, method="bon", n=6, memory_budget=BIG,
                     sampling=SamplingParams(max_new_tokens=10, temperature=0.7), seed=1)
    prompt_ids = engine.encode_prompt(PROMPT)
    for c in result.candidates:
        with torch.inference_mode():
            logits = engine.model(input_ids=torch.tensor([prompt_ids + c.token_ids])).logits[0].double()
        steps = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + c.num_tokens]
        expected = [kl_uniform_to(row) for row in torch.softmax(steps, -1).numpy()]
        assert c.token_certainties == pytest.approx(expected, abs=1e-4)
        assert c.final_score == pytest.approx(math.fsum(c.token_certainties) / c.num_tokens, abs=1e-9)


def test_partial_scores_are_the_mean_so_far_and_sr_runs_on_them(engine):
    """SR under self-certainty: each round's score of a live row is the mean certainty of its
    tokens so far; the halted rows are those eq. 4-5 cut."""
    result = run_one(engine, load_reward("self-certainty"), PROMPT, method="sr", alpha=0.5, batch_size=16,
                     decision_tokens=[3, 6], memory_budget=BIG, sampling=SAMPLING, seed=2)
    assert len(result.rounds) >= 2
    for c in result.candidates:
        assert len(c.token_certainties) == c.num_tokens
        if c.halted_round is not None:
            decision = result.rounds[c.halted_round].decision_token
            assert c.num_tokens == decision
            assert c.round_scores[-1] == pytest.approx(sum(c.token_certainties[:decision]) / decision, abs=1e-9)
    assert result.best.final_score == max(c.final_score for c in result.candidates if c.complete)


@pytest.mark.parametrize("method, params", [("pandora", {"n": 8, "min_open": 5, "cost": 0.01}), ("bon", {"n": 8})])
def test_other_methods_score_with_it(engine, method, params):
    result = run_one(engine, load_reward("self-certainty"), PROMPT, method=method, memory_budget=BIG,
                     sampling=SAMPLING, seed=3, **params)
    scored = [c for c in result.candidates if c.final_score is not None]
    assert scored and all(c.final_score == pytest.approx(np.mean(c.token_certainties)) for c in scored)


def test_without_it_nothing_is_computed_and_the_record_is_unchanged(engine, monkeypatch):
    """The hot path: a reward that does not read certainties never calls `self_certainty`, and its
    candidates' records hold no token_certainties key."""
    calls = []
    monkeypatch.setattr(sampler, "self_certainty", lambda logits: calls.append(1) or logits[:, 0])
    result = run_one(engine, load_reward("logprob"), PROMPT, method="bon", n=4, memory_budget=BIG,
                     sampling=SAMPLING, seed=0)
    assert not calls and all(not c.token_certainties for c in result.candidates)
    assert all("token_certainties" not in c for c in result.to_record(0)["candidates"])


def test_the_record_keeps_them_and_prefixes_read_them(engine):
    result = run_one(engine, load_reward("self-certainty"), PROMPT, method="bon", n=4, memory_budget=BIG,
                     sampling=SAMPLING, seed=4)
    record = json.loads(json.dumps(result.to_record(0)))
    table = score_prefixes([record], load_reward("self-certainty"), [2, 5])
    for c in record["candidates"]:
        assert c["token_certainties"] == [round(x, 5) for x in result.candidates[c["id"]].token_certainties]
        for tau in (2, 5):
            row = table[(table.candidate_id == c["id"]) & (table.tau == tau)].iloc[0]
            expected = np.mean(c["token_certainties"][:tau]) if tau < c["num_tokens"] else c["final_score"]
            assert row.partial_score == pytest.approx(expected, abs=1e-5)


def test_responses_without_certainties_are_refused_in_one_line():
    with pytest.raises(SpecrejError, match="sampled without them"):
        SelfCertaintyReward().score("p", [Response("a b", [5, 6], [-1.0, -2.0])])
    with pytest.raises(SpecrejError, match="no model: drop --reward-revision"):
        load_reward("self-certainty", revision="main")


def test_from_the_command_line_with_a_resume(generator_dir, prompts_file, tmp_path):
    from specrej.cli.main import main
    from specrej.records.io import read_records

    out = tmp_path / "sr.jsonl"
    args = ["generate", "--model", str(generator_dir), "--out", str(out), "--reward", "self-certainty",
            "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", "--method", "sr",
            "--alpha", "0.5", "--batch-size", "8", "--decision-tokens", "4"]
    two = tmp_path / "two.json"
    two.write_text(json.dumps(json.loads(prompts_file.read_text())[:2]))
    assert main([*args, "--prompts", str(two)]) == 0
    first = out.read_text().splitlines()
    assert main([*args, "--prompts", str(prompts_file)]) == 0  # a resume: the third prompt only
    lines = out.read_text().splitlines()
    assert lines[:2] == first and len(lines) == 3
    records = list(read_records(out))
    assert all(r["params"]["reward"] == "self-certainty" and r["rounds"] for r in records)
    assert all(len(c["token_certainties"]) == c["num_tokens"] for r in records for c in r["candidates"])
