"""Answer-consensus early stopping (`consensus`): the Beta posterior by hand, the stopping rule
replayed from the recorded answers (waves, and one response at a time as the official loop),
the majority vote as the answer, its parameters checked before a model loads, and the command
line with a resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specrej import SamplingParams, load_reward
from specrej.errors import SpecrejError
from specrej.methods.consensus import leader_posterior
from specrej.methods.prompt_run import run_method
from specrej.plan import check_run
from specrej.records.answers import extract_answer

PROMPT = "Write a poem about the sea."
BIG = 2**30
# one-token answers at a low temperature: the tiny model repeats itself often enough to agree
SAMPLING = SamplingParams(max_new_tokens=1, temperature=0.1)


def test_leader_posterior_by_hand():
    # P(X > 1/2) for X ~ Beta(v1 + 1, v2 + 1):
    # Beta(4, 1), density 4x^3: 1 - (1/2)^4 = 0.9375;  Beta(5, 1): 1 - (1/2)^5 = 0.96875
    assert leader_posterior([3]) == pytest.approx(0.9375, abs=1e-12)
    assert leader_posterior([4]) == pytest.approx(0.96875, abs=1e-12)
    # Beta(3, 2), density 12 x^2 (1 - x): CDF(1/2) = 12 (1/24 - 1/64) = 0.3125 -> 0.6875
    assert leader_posterior([2, 1]) == pytest.approx(0.6875, abs=1e-12)
    # Beta(4, 2), density 20 x^3 (1 - x): CDF(1/2) = 20 (1/64 - 1/160) = 0.1875 -> 0.8125; a third
    # answer's count does not enter
    assert leader_posterior([1, 3, 1]) == pytest.approx(0.8125, abs=1e-12)
    assert leader_posterior([]) == leader_posterior([2, 2]) == pytest.approx(0.5)


def run(engine, seed, **params):
    method, checked = check_run("consensus", params)
    return run_method(method, checked, engine, load_reward("logprob"), PROMPT, sampling=SAMPLING, seed=seed,
                      memory_budget=BIG, answer_extract="first-line")


def replay(answers, wave, n, threshold):
    """The responses the rule samples, from the answers in order: waves of `wave`, stop once the
    posterior of the counts so far reaches `threshold` (None answers are no votes)."""
    sampled = 0
    while sampled < n:
        sampled = min(sampled + wave, n)
        counts = Counter(a for a in answers[:sampled] if a is not None)
        if leader_posterior(counts.values()) >= threshold:
            break
    return sampled


@pytest.mark.parametrize("wave", [1, 3])
def test_the_stopping_rule_replayed_from_the_answers(engine, wave):
    stopped_early = 0
    for seed in range(6):
        result = run(engine, seed, n=24, wave=wave, threshold=0.9)
        answers = [extract_answer(c.text, "first-line") for c in result.candidates]
        assert all(c.complete for c in result.candidates)
        # what the rule would have sampled had it gone on to n is unknown; up to where it stopped,
        # the replay from the same answers stops at the same response
        assert replay(answers, wave, len(answers), 0.9) == len(answers)
        last = result.rounds[-1].rule
        assert last["counts"] == dict(sorted(Counter(a for a in answers if a is not None).items()))
        assert last["posterior"] == pytest.approx(leader_posterior(last["counts"].values()))
        assert last["stop"] == (len(answers) < 24 or last["posterior"] >= 0.9)
        assert [r.rule["measures"]["sampled"] for r in result.rounds] == [
            min((i + 1) * wave, 24) for i in range(len(result.rounds))]
        stopped_early += len(answers) < 24
    assert stopped_early  # the rule did stop somewhere (else the test would not test it)


def test_the_answer_is_the_majority(engine, tmp_path):
    """Through the run loop with a prompts file (first-line answers): the record's best gives the
    most frequent answer, params.selection says vote, and every candidate carries its answer."""
    from specrej import load_engine  # noqa: F401  (the session fixture's engine is reused)
    from specrej.api import run_prompts
    from specrej.records.io import read_records

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([{"prompt": PROMPT, "answer": "x", "extract": "first-line", "check": "exact"}]))
    out = tmp_path / "c.jsonl"
    run_prompts(prompts, out, engine=engine, reward=load_reward("logprob"), method="consensus", model_name="tiny",
                reward_name="logprob", sampling=SAMPLING, memory_budget=BIG, progress=False, seed=1, n=24, wave=3,
                threshold=0.9)
    (record,) = read_records(out)
    assert record["params"]["selection"] == "vote"
    counts = Counter(c["answer"] for c in record["candidates"] if c["answer"] is not None)
    top = max(counts.values())
    best = next(c for c in record["candidates"] if c["id"] == record["best"]["candidate_id"])
    assert counts[best["answer"]] == top


def test_parameters_are_checked_before_a_model_loads():
    with pytest.raises(SpecrejError, match="threshold"):
        check_run("consensus", {"n": 8, "threshold": 0.5})
    with pytest.raises(SpecrejError, match="wave"):
        check_run("consensus", {"n": 8, "wave": 0})
    with pytest.raises(SpecrejError, match="--n"):
        check_run("consensus", {})


def test_from_the_command_line_with_a_resume(generator_dir, tmp_path):
    from specrej.cli.main import main
    from specrej.records.io import read_records

    prompts = [{"prompt": p, "answer": "1", "extract": "first-number", "check": "numeric"}
               for p in ("Write a poem about the sea.", "Explain gravity to a child.", "List three fruits.")]
    two, three = tmp_path / "two.json", tmp_path / "three.json"
    two.write_text(json.dumps(prompts[:2]))
    three.write_text(json.dumps(prompts))
    out = tmp_path / "consensus.jsonl"
    args = ["generate", "--model", str(generator_dir), "--out", str(out), "--max-new-tokens", "4",
            "--memory-budget", "64MiB", "--no-progress", "--method", "consensus", "--n", "8", "--param", "wave=2"]
    assert main([*args, "--prompts", str(two)]) == 0
    first = out.read_text().splitlines()
    assert main([*args, "--prompts", str(three)]) == 0
    lines = out.read_text().splitlines()
    assert lines[:2] == first and len(lines) == 3
    for record in read_records(out):
        assert record["method"] == "consensus" and record["params"]["selection"] == "vote"
        assert record["reference"]["answer"] == "1" and all("correct" in c for c in record["candidates"])
        assert record["rounds"][-1]["rule"]["rule"] == "consensus"
