"""Pandora's-box Best-of-N: the rule's pieces and its stop on a hand-made sequence of rewards
(worked by hand in the comments), its invariances, and the method on the tiny model: the
choice is the rule's, replayed from the record, and on Best-of-N's shards it is the same."""

from __future__ import annotations

import math

import pytest
from scipy.special import exp1

from specrej import SamplingParams, load_reward
from specrej.api import run_one
from specrej.errors import SpecrejError
from specrej.methods.pandora import (
    PandoraStopping,
    confidence_factor,
    expected_excess,
    fair_cap,
    median_and_scale,
    replay,
)

BIG = 2**30
PROMPT = "Write a poem about the sea."


def closed_form_excess(tau, loc, scale, best):
    """E[(X/(X+M) - tau)^+] for X = loc + Exp(scale), by hand: with x0 = max(loc, tau M/(1-tau)),
    lam = 1/scale and X/(X+M) = 1 - M/(X+M),
    (1 - tau) e^{-lam (x0 - loc)} - lam M e^{lam (loc + M)} E1(lam (x0 + M))."""
    lam = 1 / scale
    x0 = max(loc, tau * best / (1 - tau))
    return (1 - tau) * math.exp(-lam * (x0 - loc)) - lam * best * math.exp(lam * (loc + best)) * exp1(lam * (x0 + best))


def test_median_and_scale_by_hand():
    # sorted [1, 2, 3, 4, 10]: the upper median x_(5//2) = 3; the upper half [3, 4, 10] has mean 17/3
    assert median_and_scale([10, 1, 4, 3, 2]) == pytest.approx((3.0, 17 / 3 - 3))
    # [1, 2, 3, 4]: x_(2) = 3, upper half [3, 4]: mean 3.5, scale 0.5
    assert median_and_scale([4, 3, 2, 1]) == pytest.approx((3.0, 0.5))
    # all equal: the scale floor, 1e-4 of the median
    assert median_and_scale([2, 2, 2]) == pytest.approx((2.0, 2e-4))


def test_confidence_factor_by_hand():
    # sqrt(ln 5 * ln 20 / 5) = sqrt(1.609438 * 2.995732 / 5) = sqrt(0.964289) = 0.981982
    assert confidence_factor(5, 0.05) == pytest.approx(0.981982, abs=1e-6)
    # sqrt(ln 20 * ln 20 / 20) = 2.995732 / sqrt(20) = 0.669866
    assert confidence_factor(20, 0.05) == pytest.approx(0.669866, abs=1e-6)


@pytest.mark.parametrize("tau, loc, scale, best", [(0.7, 0.3, 0.8 / 3, 0.311), (0.2, 1.0, 0.5, 2.0),
                                                   (0.9, 0.5, 2.0, 1.5)])
def test_expected_excess_is_the_closed_form(tau, loc, scale, best):
    assert expected_excess(tau, loc, scale, best) == pytest.approx(closed_form_excess(tau, loc, scale, best),
                                                                   rel=1e-7, abs=1e-12)


def test_fair_cap_solves_the_excess_equation_or_takes_a_bound():
    loc, scale, best = 0.3, 0.8 / 3, 0.311
    for cost in (0.02, 0.005, 0.001):
        tau = fair_cap(loc, scale, best, cost)
        assert 0.001 < tau < 0.99
        assert closed_form_excess(tau, loc, scale, best) == pytest.approx(cost, rel=1e-5)
    assert fair_cap(loc, scale, best, 10.0) == 0.001  # a cost above every excess
    # a wide fit: the excess at tau = 0.99 is still above a cost of 1e-9
    assert closed_form_excess(0.99, 1.0, 100.0, 2.0) > 1e-9
    assert fair_cap(1.0, 100.0, 2.0, 1e-9) == 0.99


def test_the_stop_on_a_hand_made_sequence():
    # rewards ln 1, ln 2, ln 3, ln 4, ln 10 -> strengths (/ the best, 10) 0.1, 0.2, 0.3, 0.4, 1.
    # median m = 0.3, upper half [0.3, 0.4, 1] mean 0.56667, scale s = 0.26667;
    # b = 0.981982 (n = 5, delta = 0.05); M = m + ln(50 / 5) * s * (1 - b)
    #   = 0.3 + 2.302585 * 0.26667 * 0.018018 = 0.311063;
    # the best's win rate f(v) = 1 / (1 + M) = 0.762740.
    # tau < f(v) iff E[(f(X) - f(v))^+] < cost (the excess falls as tau rises); that excess,
    # by the closed form, is 0.0025746: cost 0.005 stops after 5, cost 0.001 goes on.
    rewards = [math.log(x) for x in (1, 2, 3, 4, 10)]
    m, s = 0.3, (0.3 + 0.4 + 1.0) / 3 - 0.3
    best_estimate = m + math.log(10) * s * (1 - 0.981982)
    assert best_estimate == pytest.approx(0.311063, abs=1e-6)
    win_rate = 1 / (1 + best_estimate)
    assert closed_form_excess(win_rate, m, s, best_estimate) == pytest.approx(0.0025746, abs=1e-7)

    stop = replay(rewards, n_max=50, cost=0.005, min_open=5)
    assert stop.opened == 5 and stop.best_index == 4
    (index,) = stop.history
    assert index["median"] == pytest.approx(m) and index["scale"] == pytest.approx(s)
    assert index["best_estimate"] == pytest.approx(best_estimate, abs=1e-6)
    assert index["win_rate"] == pytest.approx(0.762740, abs=1e-6) and index["tau"] < index["win_rate"]

    go_on = PandoraStopping(n_max=50, cost=0.001, min_open=5)
    for r in rewards:
        go_on.add(r)
    assert not go_on.decide() and go_on.history[-1]["tau"] > go_on.history[-1]["win_rate"]
    # before min_open the rule does not apply; at n_max it always stops
    assert not PandoraStopping(n_max=50, cost=1.0, min_open=5).decide()
    assert replay([0.0] * 6, n_max=6, cost=1e-9, min_open=5).opened == 6


def test_shift_invariance_and_no_floor_at_minus_ten():
    rewards = [0.3, -1.2, 2.0, 0.5, 1.1, -0.4, 0.9, 2.0, 0.1, 1.7, -0.8, 0.6] * 3
    base = replay(rewards, n_max=36, cost=0.002, min_open=8)
    for shift in (100.0, -50.0):  # -50: all rewards below the official code's initial -10
        moved = replay([r + shift for r in rewards], n_max=36, cost=0.002, min_open=8)
        assert (moved.opened, moved.best_index) == (base.opened, base.best_index)
    assert base.best_index == 2  # the first of the tied best (2.0 at 2 and 7)


def test_minus_infinity_rewards_have_strength_zero():
    # an empty response's log-prob reward is -inf: strength 0, it never wins; all -inf: no fit, go on
    rewards = [0.3, -math.inf, 2.0, 0.5, 1.1, -0.4, 0.9, 1.3]
    with_inf = replay(rewards, n_max=8, cost=0.003, min_open=6)
    assert with_inf.best_index == 2 and all(math.isfinite(h["tau"]) for h in with_inf.history)
    assert replay([-math.inf] * 7, n_max=7, cost=0.003, min_open=6).opened == 7


def test_reward_scale_divides_the_rewards():
    rewards = [0.3, -1.2, 2.0, 0.5, 1.1, -0.4, 0.9, 1.3, 0.1, 1.7] * 2
    scaled = replay([10 * r for r in rewards], n_max=20, cost=0.003, min_open=6, reward_scale=10)
    plain = replay(rewards, n_max=20, cost=0.003, min_open=6)
    assert [h["tau"] for h in scaled.history] == pytest.approx([h["tau"] for h in plain.history])


def test_bad_rule_settings_name_the_parameter():
    with pytest.raises(SpecrejError, match=r"--param min_open \(30\) must be at most --n \(20\)"):
        PandoraStopping(n_max=20, cost=0.01, min_open=30)
    # n = 4: sqrt(ln 4 * ln 20 / 4) = 1.019 >= 1
    with pytest.raises(SpecrejError, match=r"--param min_open=4 is too few for --param delta=0.05"):
        PandoraStopping(n_max=20, cost=0.01, min_open=4)


# b = sqrt(ln m * ln 20 / m) at delta 0.05: m = 4 gives sqrt(1.386 * 2.996 / 4) = 1.019 (refused),
# m = 5 gives sqrt(1.609 * 2.996 / 5) = 0.982 (taken), and b falls as m grows from 3 on
SMALL_N_WORKS = "--param min_open from 5 to 8 works with --n 8 and --param delta=0.05"


def test_the_rule_is_checked_with_the_parameters_and_names_the_values_that_work():
    from specrej.methods import get_method

    pandora = get_method("pandora")
    with pytest.raises(SpecrejError, match=r"^--param min_open \(20\) must be at most --n \(8\): " + SMALL_N_WORKS):
        pandora.check({"n": 8, "cost": 0.01})  # the default min_open, before any model loads
    with pytest.raises(SpecrejError, match=r"^--param min_open=4 is too few for --param delta=0.05: .*; "
                       + SMALL_N_WORKS):
        pandora.check({"n": 8, "cost": 0.01, "min_open": 4})
    assert pandora.check({"n": 8, "cost": 0.01, "min_open": 5}).min_open == 5
    assert pandora.check({"n": 8, "cost": 0.01, "min_open": 8}).min_open == 8
    # N = 4 is below every min_open delta 0.05 takes; delta 0.2 (ln 5 = 1.609) takes every one from 2:
    # b(2) = b(4) = sqrt(0.693 * 1.609 / 2) = 0.747 and b(3) = sqrt(1.099 * 1.609 / 3) = 0.768
    with pytest.raises(SpecrejError, match=r"--param delta=0.05 needs min_open, and so --n, of at least 5"):
        pandora.check({"n": 4, "cost": 0.01, "min_open": 4})
    with pytest.raises(SpecrejError, match=r"--param min_open from 2 to 4 works with --n 4 and --param delta=0.2"):
        pandora.check({"n": 4, "cost": 0.01, "delta": 0.2})


def test_the_command_line_refuses_a_small_n_before_loading_the_model(prompts_file, tmp_path, capsys):
    from specrej.cli.main import main

    out = tmp_path / "o.jsonl"
    assert main(["generate", "--model", str(tmp_path / "no-model"), "--prompts", str(prompts_file), "--out", str(out),
                 "--method", "pandora", "--n", "8", "--param", "cost=0.01"]) == 2  # no model: it was not loaded
    err = capsys.readouterr().err
    assert err.startswith("specrej: error: --param min_open (20) must be at most --n (8): " + SMALL_N_WORKS)
    assert err.count("\n") == 1 and not out.exists()


# ------------------------------------------------------------------------------------------
# the method on the tiny model
# ------------------------------------------------------------------------------------------

SAMPLING = SamplingParams(max_new_tokens=12)


def test_the_choice_is_the_rule_replayed_from_the_record(engine):
    reward = load_reward("python:toy_rewards:length")
    result = run_one(engine, reward, PROMPT, method="pandora", n=12, cost=0.05, min_open=5, reward_scale=10,
                     round_size=4, memory_budget=BIG, sampling=SAMPLING, seed=3)
    (decision,) = result.rounds
    measures = decision.rule["measures"]
    opened = measures["samples_opened"]
    rewards = [c.final_score for c in result.candidates[:opened]]
    again = replay(rewards, n_max=12, cost=0.05, min_open=5, reward_scale=10)
    assert again.opened == opened and again.history == decision.rule["index"]
    assert measures["samples_drawn"] == 4 * measures["rounds"] >= opened
    assert [c.complete for c in result.candidates] == [i < opened for i in range(measures["samples_drawn"])]
    assert result.best.id == again.best_index


def test_on_best_of_n_shards_the_decision_is_the_same(engine):
    reward = load_reward("python:toy_rewards:length")
    common = {"memory_budget": BIG, "sampling": SAMPLING, "seed": 11}
    bon = run_one(engine, reward, PROMPT, method="bon", n=16, batch_size=4, **common)
    pandora = run_one(engine, reward, PROMPT, method="pandora", n=16, cost=0.01, min_open=6, reward_scale=10,
                      round_size=4, **common)
    drawn = pandora.rounds[0].rule["measures"]["samples_drawn"]
    assert [c.token_ids for c in pandora.candidates] == [c.token_ids for c in bon.candidates[:drawn]]
    from_bon = replay([c.final_score for c in bon.candidates], n_max=16, cost=0.01, min_open=6, reward_scale=10)
    assert from_bon.opened == pandora.rounds[0].rule["measures"]["samples_opened"]
    assert from_bon.best_index == pandora.best.id


def test_from_the_command_line(generator_dir, prompts_file, tmp_path):
    from specrej.cli.main import main
    from specrej.records.io import read_records

    out = tmp_path / "pandora.jsonl"
    assert main(["generate", "--model", str(generator_dir), "--prompts", str(prompts_file), "--out", str(out),
                 "--max-new-tokens", "8", "--memory-budget", "64MiB", "--no-progress", "--method", "pandora",
                 "--n", "8", "--param", "cost=0.01", "--param", "min_open=5", "--param", "reward_scale=10"]) == 0
    records = list(read_records(out))
    assert records and all(r["method"] == "pandora" and r["params"]["cost"] == 0.01 for r in records)
