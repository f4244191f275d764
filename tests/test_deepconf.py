"""DeepConf online: token confidence, group confidence and the threshold on hand-worked numbers,
the online stop, and the method on the tiny model (select reward with n_init = n is Best-of-N,
stopped traces are halted where the record says, the reward-free choice)."""

from __future__ import annotations

import math

import pytest
import torch

from specrej import SamplingParams, load_reward
from specrej.api import run_one
from specrej.engine.sampler import top_logprobs
from specrej.errors import SpecrejError
from specrej.methods.deepconf import (
    TraceConfidences,
    group_confidences,
    lowest_group_confidence,
    most_confident,
    threshold,
    token_confidence,
)

BIG = 2**30
PROMPT = "Write a poem about the sea."


def test_token_confidence_by_hand():
    # row 0: top-2 probs 1/2, 1/4: -(ln 1/2 + ln 1/4) / 2 = ln 8 / 2 = 1.039721
    # row 1: top-2 probs 0.8, 0.1: -(ln 0.8 + ln 0.1) / 2 = ln 12.5 / 2 = 1.262864
    logprobs = torch.log(torch.tensor([[0.5, 0.25], [0.8, 0.1]]))
    assert token_confidence(logprobs).tolist() == pytest.approx([1.039721, 1.262864], abs=1e-6)


def test_token_confidence_from_the_samplers_top_logprobs():
    # logits ln [4, 2, 1, 1]: probs [1/2, 1/4, 1/8, 1/8] whatever the temperature of sampling;
    # top 2 -> ln 8 / 2; top 4 -> -(ln 1/2 + ln 1/4 + 2 ln 1/8) / 4 = (1 + 2 + 6) ln 2 / 4 = 1.559581
    logits = torch.log(torch.tensor([[4.0, 2.0, 1.0, 1.0]]))
    assert token_confidence(top_logprobs(logits, 2)).item() == pytest.approx(math.log(8) / 2, abs=1e-6)
    assert token_confidence(top_logprobs(logits, 4)).item() == pytest.approx(9 * math.log(2) / 4, abs=1e-6)


def test_group_confidences_by_hand():
    confs = [3.0, 1.0, 2.0, 6.0]
    assert group_confidences(confs, 2) == pytest.approx([2.0, 1.5, 4.0])  # (3+1)/2, (1+2)/2, (2+6)/2
    assert lowest_group_confidence(confs, 2) == pytest.approx(1.5)
    assert group_confidences(confs, 4) == pytest.approx([3.0])
    assert group_confidences(confs, 5) == pytest.approx([3.0])  # shorter than the window: the mean of all
    assert group_confidences([], 2) == [] and lowest_group_confidence([], 2) == -math.inf


def test_threshold_by_hand():
    lowest = [5.0, 1.0, 4.0, 2.0, 3.0]
    # eta 0.9 (DeepConf-high): the 10th percentile, rank 0.1 * 4 = 0.4 between 1 and 2 -> 1.4
    assert threshold(lowest, 0.9) == pytest.approx(1.4)
    # eta 0.1 (DeepConf-low): the 90th percentile, rank 3.6 between 4 and 5 -> 4.6
    assert threshold(lowest, 0.1) == pytest.approx(4.6)
    with pytest.raises(ValueError, match="no warm-up trace"):
        threshold([], 0.5)


def test_the_online_stop_by_hand():
    trace = TraceConfidences(window=2, stop_below=2.0)
    # candidate 7: 3 (window filling, no stop), 1 (mean 2.0, not below), 2.5 (mean 1.75 < 2: stop at 3 tokens)
    # candidate 8: 0.5 alone never fills the window, so never stops
    assert trace.observe([7, 8], [3.0, 0.5]) == []
    assert trace.observe([7], [1.0]) == []
    assert trace.observe([7], [2.5]) == [7]
    assert trace.stopped_at == {7: 3}
    assert trace.lowest(7) == pytest.approx(1.75) and trace.lowest(8) == pytest.approx(0.5)


def test_most_confident_ties_go_to_the_lowest_id():
    assert most_confident({4: 1.0, 2: 3.0, 9: 3.0}) == 2


# ------------------------------------------------------------------------------------------
# the method on the tiny model
# ------------------------------------------------------------------------------------------

SAMPLING = SamplingParams(max_new_tokens=12)


def test_select_reward_with_n_init_n_is_best_of_n(engine):
    reward = load_reward("python:toy_rewards:letter_e")
    common = {"memory_budget": BIG, "sampling": SAMPLING, "seed": 7}
    bon = run_one(engine, reward, PROMPT, method="bon", n=8, **common)
    deep = run_one(engine, reward, PROMPT, method="deepconf", n=8, n_init=8, window=4, **common)
    assert [c.token_ids for c in deep.candidates] == [c.token_ids for c in bon.candidates]
    assert deep.best.id == bon.best.id and deep.best.final_score == bon.best.final_score
    assert deep.rounds[0].rule["measures"]["traces_stopped"] == 0


def test_stopped_traces_are_halted_where_the_record_says(engine):
    reward = load_reward("python:toy_rewards:letter_e")
    # eta 0.1 (DeepConf-low): the threshold is the 90th percentile of the warm-up, most later traces stop
    result = run_one(engine, reward, PROMPT, method="deepconf", n=16, n_init=8, window=3, eta=0.1, batch_size=4,
                     memory_budget=BIG, sampling=SAMPLING, seed=2)
    (decision,) = result.rounds
    rule, measures = decision.rule, decision.rule["measures"]
    stopped = {int(cid): t for cid, t in rule["stopped_at"].items()}
    assert stopped and measures["traces_stopped"] == len(stopped)
    lowest = {int(cid): v for cid, v in rule["lowest_group_confidence"].items()}
    warmup = sorted(lowest)[:8]
    assert measures["threshold"] == pytest.approx(threshold([lowest[c] for c in warmup], 0.1))
    for c in result.candidates[8:]:
        if c.id in stopped:
            # halted at the token whose window fell below the threshold: no token after it
            assert not c.complete and c.halted_round == 0 and c.num_tokens == stopped[c.id] >= 3
            assert lowest[c.id] < measures["threshold"]
        else:
            assert c.complete and (c.num_tokens < 3 or lowest[c.id] >= measures["threshold"])
    # a halted trace generates nothing more: the tokens generated are the candidates' tokens
    assert result.tokens["generated"] == sum(c.num_tokens for c in result.candidates)
    assert measures["later_tokens"] == sum(c.num_tokens for c in result.candidates[8:])
    assert measures["tokens_at_stop_sum"] == sum(stopped.values())
    # the official vote's voters: the warm-up traces at or above the threshold and every later trace
    # that completed, each weighted by its lowest group confidence
    voters = {c.id: lowest[c.id] for c in result.candidates if c.complete
              and (c.id >= 8 or lowest[c.id] >= measures["threshold"])}
    assert {int(cid): w for cid, w in rule["vote_weights"].items()} == voters
    assert any(lowest[c] < measures["threshold"] for c in warmup)  # the filter left some warm-up trace out


def test_select_confidence_keeps_the_most_confident_completed_trace(engine):
    reward = load_reward("python:toy_rewards:letter_e")
    result = run_one(engine, reward, PROMPT, method="deepconf", n=12, n_init=6, window=3, eta=0.5,
                     select="confidence", memory_budget=BIG, sampling=SAMPLING, seed=4)
    rule = result.rounds[0].rule
    lowest = {int(cid): v for cid, v in rule["lowest_group_confidence"].items()}
    finished = [cid for cid in lowest if str(cid) not in rule["stopped_at"]]
    expected = max(finished, key=lambda cid: (lowest[cid], -cid))
    assert [c.id for c in result.candidates if c.complete] == [expected] == [rule["chosen"]]
    assert result.best.id == expected


def test_n_init_above_n_is_refused(engine):
    reward = load_reward("python:toy_rewards:letter_e")
    with pytest.raises(SpecrejError, match=r"--param n_init \(16\) must be at most --n \(8\)"):
        run_one(engine, reward, PROMPT, method="deepconf", n=8, memory_budget=BIG, sampling=SAMPLING, seed=0)


def test_the_stops_recomputed_from_transformers_logits(engine):
    """Every trace's token confidences recomputed independently, from transformers' forward over
    prompt + its tokens (top 20 of the log-softmax at each position), and from them the
    threshold and each later trace's stop: the first full window whose mean is below it."""
    window, n_init, eta = 3, 6, 0.3
    result = run_one(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, method="deepconf", n=14,
                     n_init=n_init, window=window, eta=eta, memory_budget=BIG, sampling=SAMPLING, seed=5)
    rule = result.rounds[0].rule
    prompt_ids = engine.encode_prompt(PROMPT)

    def confidences(candidate):
        ids = torch.tensor([prompt_ids + candidate.token_ids])
        with torch.inference_mode():
            logits = engine.model(input_ids=ids).logits[0].float()
        steps = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + candidate.num_tokens]
        return (-steps.log_softmax(-1).topk(20, dim=-1).values.mean(-1)).tolist()

    confs = {c.id: confidences(c) for c in result.candidates}
    bar = threshold([lowest_group_confidence(confs[i], window) for i in range(n_init)], eta)
    assert rule["measures"]["threshold"] == pytest.approx(bar, abs=1e-4)
    stops = {}
    for c in result.candidates[n_init:]:
        means = [sum(confs[c.id][t - window:t]) / window for t in range(window, c.num_tokens + 1)]
        assert all(abs(m - bar) > 1e-4 for m in means), "a window mean too close to the threshold to recompute"
        below = [t for t, m in zip(range(window, c.num_tokens + 1), means) if m < bar]
        if below:
            stops[str(c.id)] = below[0]
            assert below[0] == c.num_tokens  # nothing generated after the stop
    assert stops and stops == rule["stopped_at"]


def test_from_the_command_line(generator_dir, prompts_file, tmp_path):
    from specrej.cli.main import main
    from specrej.records.io import read_records

    out = tmp_path / "deepconf.jsonl"
    assert main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(out),
                 "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", "--method", "deepconf",
                 "--n", "8", "--param", "n_init=4", "--param", "window=3", "--param", "eta=0.1"]) == 0
    records = list(read_records(out))
    assert records and all(r["method"] == "deepconf" and r["params"]["n_init"] == 4 for r in records)
