"""analysis.accuracy and analysis.accuracy_figure on hand-worked pools: every expected value below
is computed by hand in the comments, not by running the code."""

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from analysis.accuracy import (
    accuracy_summary,
    candidate_frame,
    ladder_selections,
    selections,
    vote_ladder,
)
from analysis.accuracy_figure import figure_accuracy_vs_compute
from analysis.correctness import correctness_prediction
from analysis.figures import save_figure

pytestmark = pytest.mark.filterwarnings("error")

BON_DISPLAY = {"name": "Best-of-N", "color": "#ff7f0e", "marker": "s", "reference": True}
SR_DISPLAY = {"name": "SR", "color": "#1f77b4", "marker": "o", "reference": False}
REFERENCES = {1: "3", 2: "7", 3: "4"}
# Per prompt (reference above), the pool's 4 candidates in shard order: (answer, final score).
POOLS = {
    1: [("3", 0.0), ("5", 2.0), ("3", 1.0), ("3", 0.5)],
    2: [("7", 1.0), ("2", 0.0), ("2", -1.0), (None, 3.0)],
    3: [("1", 0.0), ("1", 0.5), ("4", 0.2), ("4", 0.1)],
}
# All 4 candidates, by rule (select: vote ties go to the answer whose best response scores highest;
# weighted-vote weighs each answer by sum exp(score - top), top = the best score among answered ones):
#   prompt 1: reward -> id 1 ("5", 2.0) wrong; vote "3" 3 to "5" 1 -> id 2 (best "3") right;
#             weighted "3" e^-2 + e^-1 + e^-1.5 = 0.726 < "5" e^0 = 1 -> id 1 wrong.
#   prompt 2: reward -> id 3 (no answer, 3.0) wrong; vote among ids 0-2: "2" 2 to "7" 1 -> id 1 (0.0) wrong;
#             weighted, top 1.0: "7" e^0 = 1 > "2" e^-1 + e^-2 = 0.503 -> id 0 right.
#   prompt 3: reward -> id 1 (0.5) wrong; vote "1" 2, "4" 2, tie: "1"'s best 0.5 > "4"'s 0.2 -> id 1 wrong;
#             weighted, top 0.5: "1" e^-0.5 + e^0 = 1.607 > "4" e^-0.3 + e^-0.4 = 1.411 -> id 1 wrong.
SELECTED_IDS = {"reward": [1, 3, 1], "vote": [2, 1, 1], "weighted-vote": [1, 0, 1]}
SELECTED_CORRECT = {"reward": [False, False, False], "vote": [True, False, False],
                    "weighted-vote": [False, True, False]}
# Each pool record ran as 2 shards of 2 (shards=2, compute_s the shards' mean): compute 2 x mean.
POOL_COMPUTE = {1: 2.0, 2: 4.0, 3: 6.0}  # mean shard seconds -> 4, 8, 12 seconds per prompt, 24 in all
POOL_FLOPS = {1: 400.0, 2: 800.0, 3: 1200.0}


def candidate(id, answer, score, reference, complete=True):
    answered = {"answer": answer, "correct": answer == reference} if complete else {}
    return {"id": id, "text": f"A: {answer}", "num_tokens": 3, "complete": complete, "final_score": score,
            "halted_round": None if complete else 0, **answered}


def record(prompt_id, method, setting, candidates, compute_s, flops, display, n, shards=1, label=None):
    params = {"n": n, "model": "gen", "reward": "rm", "shards": shards, "seed": 0,
              "setting": {"method": method, "params": setting, "label": label or f"Bo{n}"}, "display": display}
    return {"prompt_id": prompt_id, "prompt": "Q", "method": method, "params": params,
            "reference": {"answer": REFERENCES[prompt_id], "extract": "first-number", "check": "numeric"},
            "best": {"candidate_id": 0, "text": "", "score": 0.0, "num_tokens": 3}, "candidates": candidates,
            "timing": {"total_s": 100.0, "compute_s": compute_s, "threads": 1}, "flops": {"total": flops}}


def pool_records() -> list[dict]:
    return [record(p, "bon", {"n": 4}, [candidate(i, a, s, REFERENCES[p]) for i, (a, s) in enumerate(POOLS[p])],
                   POOL_COMPUTE[p], POOL_FLOPS[p], BON_DISPLAY, n=4, shards=2) for p in POOLS]


def test_candidate_frame_has_one_row_per_completed_candidate_with_its_record():
    sr = record(1, "sr", {"alpha": 0.5}, [candidate(0, "3", 1.0, "3"), candidate(1, None, None, "3", complete=False)],
                1.5, 10.0, SR_DISPLAY, n=8, label="SR α=0.5")
    no_reference = {**pool_records()[1], "reference": None}
    failed = {"prompt_id": 3, "prompt": "Q", "method": "sr", "params": {}, "error": "prompt too long"}
    frame = candidate_frame([sr, no_reference, failed], meta={"pair": "Gen / RM", "study": "answers"})
    assert frame[["prompt_id", "candidate_id", "answer", "correct", "final_score"]].values.tolist() == [
        [1, 0, "3", True, 1.0]]  # the halted candidate, the prompt without reference and the failure left out
    row = frame.iloc[0]
    assert (row["method"], row["setting"], row["method_label"], row["own_rule"]) == (
        "sr", '{"alpha":0.5}', "SR α=0.5", "reward")
    assert (row["work_s"], row["time_s"], row["shards"], row["flops"]) == (1.5, 100.0, 1, 10.0)
    assert (row["pair"], row["study"], row["reference_answer"], row["color"]) == ("Gen / RM", "answers", "3", "#1f77b4")


def test_candidate_frame_refuses_a_record_that_kept_only_the_chosen_candidate():
    merged = {**pool_records()[0], "num_candidates": 8}  # merge_shards without all_candidates keeps 4 of 8 here
    with pytest.raises(ValueError, match="all_candidates"):
        candidate_frame([merged])


def test_every_rule_selects_by_hand():
    selected = selections(candidate_frame(pool_records()))
    for rule, ids in SELECTED_IDS.items():
        mine = selected[selected["rule"] == rule].sort_values("prompt_id")
        assert mine["candidate_id"].tolist() == ids, rule
        assert mine["correct"].tolist() == SELECTED_CORRECT[rule], rule
    assert selected["n_candidates"].eq(4).all()
    assert selected.loc[selected["rule"] == "reward", "own_rule_selected"].all()


def test_a_record_without_a_completed_candidate_counts_as_wrong():
    halted = record(1, "sr", {"alpha": 0.5}, [candidate(0, None, None, "3", complete=False)], 1.0, 1.0,
                    SR_DISPLAY, n=8, label="SR α=0.5")
    frame = candidate_frame([halted])
    assert len(frame) == 1 and pd.isna(frame["candidate_id"].iloc[0])  # kept, so its compute still counts
    selected = selections(frame)
    assert selected["correct"].tolist() == [False, False, False]
    assert selected["n_candidates"].tolist() == [0, 0, 0]


def test_the_ladder_by_hand():
    """First k of each pool, in shard order:
    k=1: ids 0 ("3" right, "7" right, "1" wrong): every rule 2/3 = 66.7 %, pass@1 66.7 %;
    k=2: prompt 1 ids 0-1 ("3" 0.0, "5" 2.0): reward id 1 wrong, vote tie -> "5" (2.0) wrong,
         weighted "3" e^-2 < "5" 1 wrong; prompt 2 ("7" 1.0, "2" 0.0): every rule id 0 right;
         prompt 3 ("1", "1") wrong: every rule 1/3 = 33.3 %, pass@2 2/3 = 66.7 %;
    k=4: SELECTED_CORRECT: reward 0 %, vote 33.3 %, weighted 33.3 %, pass@4 100 %.
    Compute, scaled: k/4 of each prompt's 2 x mean shard seconds (4, 8, 12): 6, 12, 24 seconds,
    relative to k = 4: 0.25, 0.5, 1; FLOPs k/4 x 2400."""
    ladder = vote_ladder(candidate_frame(pool_records()), [1, 2, 4], reference_n=4, n_resamples=200)
    expected = {(1, "reward"): 200 / 3, (1, "vote"): 200 / 3, (1, "weighted-vote"): 200 / 3,
                (2, "reward"): 100 / 3, (2, "vote"): 100 / 3, (2, "weighted-vote"): 100 / 3,
                (4, "reward"): 0.0, (4, "vote"): 100 / 3, (4, "weighted-vote"): 100 / 3}
    got = ladder.set_index(["k", "rule"])
    for key, accuracy in expected.items():
        assert got.loc[key, "accuracy"] == pytest.approx(accuracy), key
    assert ladder.set_index("k")["pass_at_k"].groupby("k").first().tolist() == pytest.approx([200 / 3, 200 / 3, 100])
    assert got.loc[(2, "vote"), "ladder_label"] == "SC@2" and got.loc[(4, "reward"), "ladder_label"] == "BoN@4"
    assert got.xs("vote", level="rule")["compute_s"].tolist() == pytest.approx([6.0, 12.0, 24.0])
    assert got.xs("vote", level="rule")["relative_compute"].tolist() == pytest.approx([0.25, 0.5, 1.0])
    assert got.xs("vote", level="rule")["flops"].tolist() == pytest.approx([600.0, 1200.0, 2400.0])
    assert ladder["relative_compute_lo"].tolist() == pytest.approx(ladder["relative_compute_hi"].tolist())  # k/4
    for column in ("accuracy", "pass_at_k"):
        assert (ladder[f"{column}_lo"] <= ladder[column] + 1e-9).all()
        assert (ladder[column] <= ladder[f"{column}_hi"] + 1e-9).all()
    assert (ladder["pass_at_k"] >= ladder["accuracy"]).all()


def test_ladder_selections_read_the_first_k_candidates_only():
    selected = ladder_selections(candidate_frame(pool_records()), [2])
    prompt_1 = selected[selected["prompt_id"] == 1].set_index("rule")
    assert prompt_1.loc["reward", "candidate_id"] == 1  # id 2, prompt 1's vote at k = 4, is past k = 2
    assert (prompt_1.loc["pass", "correct"], prompt_1.loc["vote", "correct"]) == (True, False)
    assert set(selected["method_label"]) == {"Bo2"} and set(selected["setting"]) == {'{"n":2}'}


def test_the_ladder_refuses_a_k_beyond_the_pool_and_needs_its_reference():
    with pytest.raises(ValueError, match="fewer than k = 8"):
        vote_ladder(candidate_frame(pool_records()), [4, 8], reference_n=4)
    with pytest.raises(ValueError, match="reference_n"):
        vote_ladder(candidate_frame(pool_records()), [1, 2], reference_n=4)


def hand_selected() -> pd.DataFrame:
    """20 prompts: SC@16 right on 8 (40 %) at 1 s each, SC@32 on 10 (50 %) as 2 shards of 1 s, SR's
    reward pick on 9 (45 %) at 1 s; wall time 5 s, SR's 1 s (eq. 7 reads work_s, not these)."""
    rows = []
    for p in range(20):
        for method, n, setting, label, rule, right, shards, flops in [
                ("bon", 16, '{"n":16}', "Bo16", "vote", p < 8, 1, 10.0),
                ("bon", 32, '{"n":32}', "Bo32", "vote", p < 10, 2, 20.0),
                ("sr", 128, '{"alpha":0.5}', "SR α=0.5", "reward", p < 9, 1, 30.0)]:
            rows.append({"prompt_id": f"p{p}", "method": method, "setting": setting, "method_label": label, "n": n,
                         "rule": rule, "correct": right, "time_s": 1.0 if method == "sr" else 5.0, "work_s": 1.0,
                         "shards": shards,
                         "flops": flops, "reference": method == "bon"})
    return pd.DataFrame(rows)


def test_sc_equivalent_compute_on_a_hand_made_ladder():
    """SR at 45 % between SC@16 (40 %, compute 1) and SC@32 (50 %, compute 2), linear in log
    compute: log x = log 1 + (45 - 40) / (50 - 40) x (log 2 - log 1), x = sqrt(2); SR's compute
    is 1 (1 s a prompt, as Bo16's), so the speedup is sqrt(2) = 1.414.  In FLOPs SR costs 30 to
    Bo16's 10 (3x) and SC@32 20 (2x): SC-equivalent FLOPs sqrt(2), speedup sqrt(2) / 3 = 0.471."""
    summary = accuracy_summary(hand_selected(), reference_n=16, n_resamples=300).set_index("method_label")
    assert summary["accuracy"].tolist() == pytest.approx([40.0, 50.0, 45.0])
    assert summary["relative_compute"].tolist() == pytest.approx([1.0, 2.0, 1.0])  # 2 shards x 1 s; not wall time
    assert summary["relative_flops"].tolist() == pytest.approx([1.0, 2.0, 3.0])
    sr = summary.loc["SR α=0.5"]
    assert sr["sc_equivalent_status"] == "interpolated"
    assert sr["sc_equivalent_compute"] == pytest.approx(math.sqrt(2))
    assert sr["sc_speedup"] == pytest.approx(1.414, abs=5e-4)
    assert sr["sc_flops_speedup"] == pytest.approx(math.sqrt(2) / 3)
    assert sr["n_prompts"] == 20
    assert math.isnan(summary.loc["Bo16", "sc_speedup"])  # the curve's own points are not located on it
    for column in ("accuracy", "sc_speedup", "sc_equivalent_compute"):
        assert sr[f"{column}_lo"] <= sr[column] <= sr[f"{column}_hi"], column
    assert summary.loc["Bo16", "accuracy_lo"] < 40.0 < summary.loc["Bo16", "accuracy_hi"]


def test_accuracy_summary_refuses_two_pairs_mixed_and_splits_them_by_pair():
    selected = pd.concat([hand_selected().assign(pair="A"), hand_selected().assign(pair="B")])
    with pytest.raises(ValueError, match="by=\\['pair'\\]"):
        accuracy_summary(selected, n_resamples=0)
    summary = accuracy_summary(selected, by=["pair"], n_resamples=0)
    assert summary["pair"].tolist() == ["A"] * 3 + ["B"] * 3
    assert np.isnan(summary["accuracy_lo"]).all()  # no resamples, no interval


def test_accuracy_summary_of_records_counts_every_rule():
    """The pool's records as Best-of-4 with SR beside them; accuracies of SELECTED_CORRECT."""
    sr = [record(p, "sr", {"alpha": 0.5}, [candidate(0, REFERENCES[p], 0.0, REFERENCES[p])], 2.0, 1.0, SR_DISPLAY,
                 n=8, label="SR α=0.5") for p in (1, 2, 3)]  # always right
    summary = accuracy_summary(selections(candidate_frame(pool_records() + sr)), reference_n=4, n_resamples=100)
    by_rule = summary.set_index(["method_label", "rule"])["accuracy"]
    assert by_rule[("Bo4", "reward")] == 0.0 and by_rule[("Bo4", "vote")] == pytest.approx(100 / 3)
    assert by_rule[("SR α=0.5", "vote")] == 100.0
    # SR: 2 s a prompt (6) against Bo4's 2 shards x 2, 4, 6 s (24): 0.25
    assert summary.loc[summary["method"] == "sr", "relative_compute"].tolist() == pytest.approx([0.25] * 3)
    assert (summary.loc[summary["method"] == "sr", "sc_equivalent_status"] == "above_range").all()


def test_correctness_prediction_by_hand():
    """tau 4, prompt 1: correct (3, 1) against wrong (2, 0): pairs 3>2, 3>0, 1<2, 1>0: AUROC 3/4;
    point-biserial of x = (1,1,0,0) on y = (3,1,2,0): cov 1 / sqrt(1 x 5) = 0.4472.
    Prompt 2: correct (5) against wrong (6, 5): 5<6 0, 5=5 1/2: AUROC 0.25; x = (1,0,0), y = (5,6,5):
    cov -1/3, variances 2/3 and 2/3: r = -0.5.  Within: means 0.5 and -0.0264.
    Pooled: correct (3, 1, 5) against wrong (2, 0, 6, 5): 3 beats 2, 0; 1 beats 0; 5 beats 2, 0 and
    ties 5: 5.5 / 12 = 0.4583; r: n 7, sum xy 9, sums x 3, y 22, y^2 100: cov 9 - 66/7 = -3/7,
    ss_x 12/7, ss_y 216/7: r = -3 / sqrt(2592) = -0.05893.
    tau 8, prompt 1 partial (0, 2, 1, 3): 0<1, 0<3, 2>1, 2<3: AUROC 1/4."""
    answers = {1: ["3", "3", "5", "5"], 2: ["7", "1", "1"]}
    records = [record(p, "bon", {"n": 4}, [candidate(i, a, 0.0, REFERENCES[p]) for i, a in enumerate(answers[p])],
                      1.0, 1.0, BON_DISPLAY, n=4) for p in answers]
    partial = {(4, 1): [3, 1, 2, 0], (4, 2): [5, 6, 5], (8, 1): [0, 2, 1, 3], (8, 2): [1, 1, 1], (4, 9): [1, 2]}
    prefixes = pd.DataFrame([{"prompt_id": str(p), "candidate_id": i, "tau": tau, "partial_score": float(s),
                              "final_score": 0.0, "num_tokens": 3, "finished_before_tau": False}
                             for (tau, p), scores in partial.items() for i, s in enumerate(scores)])
    result = correctness_prediction(prefixes, candidate_frame(records), n_resamples=200).set_index("tau")
    at_4 = result.loc[4]
    assert (at_4["n_prompts"], at_4["n_candidates"], at_4["n_correct"], at_4["n_prompts_within"]) == (2, 7, 3, 2)
    assert at_4["auroc_within"] == pytest.approx(0.5)
    assert at_4["auroc_pooled"] == pytest.approx(5.5 / 12)
    assert at_4["pointbiserial_within"] == pytest.approx((1 / math.sqrt(5) - 0.5) / 2)
    assert at_4["pointbiserial_pooled"] == pytest.approx(-3 / math.sqrt(2592))
    # prompt 2's constant partial at tau 8: AUROC 1/2 (all ties), no correlation
    assert result.loc[8, "auroc_within"] == pytest.approx((0.25 + 0.5) / 2)
    assert result.loc[8, "pointbiserial_within"] == pytest.approx(-1 / math.sqrt(5))  # prompt 1 reversed
    for name in ("auroc_within", "auroc_pooled", "pointbiserial_within", "pointbiserial_pooled"):
        assert at_4[f"{name}_lo"] <= at_4[name] <= at_4[f"{name}_hi"], name


def test_figure_draws_both_ladders_pass_at_k_and_every_configuration(tmp_path):
    sr = [record(p, "sr", {"alpha": a}, [candidate(0, REFERENCES[p], 0.0, REFERENCES[p])], c, 1.0, SR_DISPLAY,
                 n=8, label=f"SR α={a}") for p in (1, 2, 3) for a, c in ((0.5, 2.0), (0.7, 3.0))]
    summary = accuracy_summary(selections(candidate_frame(pool_records() + sr)), reference_n=4, n_resamples=50)
    ladder = vote_ladder(candidate_frame(pool_records()), [1, 2, 4], reference_n=4, n_resamples=50)
    figure = figure_accuracy_vs_compute(summary, ladder, point_rules=("reward", "vote"), reference_n=4)
    axes = figure.axes[0]
    labels = axes.get_legend_handles_labels()[1]
    assert labels == ["BoN@k", "SC@k", "weighted SC@k", "pass@k (ceiling)", "SR (reward)", "SR (vote)"]
    bars = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 6
    points = bars[-1].lines[0]
    assert len(points.get_xdata()) == 2  # both SR settings
    assert axes.get_xscale() == "log" and axes.get_xlabel() == "Compute relative to SC@4"
    assert sorted(text.get_text() for text in axes.texts) == ["α=0.5", "α=0.5", "α=0.7", "α=0.7"]
    paths = save_figure(figure, tmp_path / "accuracy")
    assert paths[0].read_bytes().startswith(b"\x89PNG")


def test_a_method_that_records_its_own_vote_is_voted_by_its_weights():
    """Prompt 1's pool as a DeepConf run whose filter kept ids 0, 1 and 3 with confidences 0.2, 1.5
    and 0.2: its vote is "5" (1.5) over "3" (0.2 + 0.2 = 0.4), id 1, wrong, where the plain majority
    over all four picks "3" (id 2, right); the other rules do not read the weights."""
    run = record(1, "deepconf", {"n": 4}, [candidate(i, a, s, REFERENCES[1]) for i, (a, s) in enumerate(POOLS[1])],
                 1.0, 100.0, SR_DISPLAY, n=4, label="DeepConf N=4")
    run["rounds"] = [{"rule": {"rule": "deepconf", "vote_weights": {"0": 0.2, "1": 1.5, "3": 0.2}}}]
    frame = candidate_frame([run])
    assert frame["vote_weight"].tolist() == [0.2, 1.5, 0.0, 0.2]
    chosen = selections(frame).set_index("rule")
    assert chosen.loc["vote", "candidate_id"] == 1 and not chosen.loc["vote", "correct"]
    assert chosen.loc["reward", "candidate_id"] == 1 and chosen.loc["weighted-vote", "candidate_id"] == 1
    plain = selections(candidate_frame(pool_records()[:1])).set_index("rule")
    assert plain.loc["vote", "candidate_id"] == 2 and plain.loc["vote", "correct"]
