"""analysis.io: trajectory JSONL and prefix parquet into frames."""

import json
import math

import pandas as pd
import pytest

from analysis.io import (
    RUNS_COLUMNS,
    best_candidate,
    best_responses_frame,
    failed_prompts,
    load_prefix_table,
    load_trajectories,
    record_configuration,
)
from specrej.errors import SpecrejError

pytestmark = pytest.mark.filterwarnings("error")


def candidate(id, final_score, probabilities, halted_round=None):
    return {"id": id, "text": f"response {id}", "token_ids": list(range(len(probabilities))),
            "token_logprobs": [math.log(p) for p in probabilities], "num_tokens": len(probabilities),
            "finished": True, "complete": final_score is not None, "final_score": final_score,
            "halted_round": halted_round, "round_scores": []}


# Shaped like specrej's records: SR params carry init_batch_size (no n), best names its candidate.
SR_DISPLAY = {"name": "SR", "color": "#1f77b4", "marker": "o", "reference": False}
BON_DISPLAY = {"name": "Best-of-N", "color": "#ff7f0e", "marker": "s", "reference": True}
SR_RECORD = {
    "prompt_id": "p1", "prompt": "Hi", "method": "sr",
    "params": {"alpha": 0.5, "init_batch_size": 8, "seed": 0, "model": "gen", "reward": "rm",
               "setting": {"method": "sr", "params": {"alpha": 0.5}, "label": "SR α=0.5"}, "display": SR_DISPLAY},
    "best": {"candidate_id": 1, "text": "response 1", "score": 2.0, "num_tokens": 2},
    "candidates": [
        candidate(0, None, [0.9, 0.9, 0.9], halted_round=0),  # halted: no final score
        candidate(1, 2.0, [0.5, 0.5]),  # the answer: perplexity 2
        candidate(2, 1.0, [0.1]),
    ],
    "rounds": [{"decision_token": 4, "batch_before": 8, "batch_after": 4, "cutoff": 0.3}],
    "timing": {"total_s": 3.0, "generate_s": 2.0, "score_s": 1.0, "compute_s": 2.5},
    "tokens": {"generated": 40, "scored": 20}, "peak_kv_bytes": 1024, "worst": {"candidate_id": 2, "score": 1.0},
}
BON_RECORD = {**SR_RECORD, "method": "bon", "rounds": [],
              "params": {"n": 16, "batch_size": 8, "seed": 0, "model": "gen", "reward": "rm",
                         "setting": {"method": "bon", "params": {"n": 16, "batch_size": 8}, "label": "Bo16"},
                         "display": BON_DISPLAY}}
FAILED_RECORD = {"prompt_id": "p2", "prompt": "Oops", "method": "sr", "params": {}, "error": "prompt too long"}
UNANSWERED_RECORD = {**SR_RECORD, "prompt_id": "p3", "best": None}


def test_jsonl_round_trip_and_runs_frame(tmp_path):
    sr_path, bon_path = tmp_path / "sr.jsonl", tmp_path / "bon.jsonl"  # one file per method, as runs are
    sr_path.write_text("\n".join(json.dumps(r) for r in [SR_RECORD, FAILED_RECORD, UNANSWERED_RECORD]) + "\n\n")
    bon_path.write_text(json.dumps(BON_RECORD) + "\n")
    sr_records = load_trajectories(sr_path)
    loaded = sr_records[:2] + load_trajectories(bon_path) + sr_records[2:]
    assert [r["prompt_id"] for r in loaded] == ["p1", "p2", "p1", "p3"]

    runs = best_responses_frame(loaded)
    assert list(runs.columns) == RUNS_COLUMNS and "alpha" not in runs.columns and "delta" not in runs.columns
    assert runs["method"].tolist() == ["sr", "bon"]
    sr, bon = runs.iloc[0], runs.iloc[1]
    assert (sr["n"], sr["batch_size"], sr["setting"], sr["method_label"]) == (8, 8, '{"alpha":0.5}', "SR α=0.5")
    assert (bon["n"], bon["setting"], bon["method_label"]) == (16, '{"n":16}', "Bo16")
    assert math.isnan(sr["flops"]) and math.isnan(bon["flops"])  # no FLOP count recorded
    assert (sr["method_name"], sr["color"], sr["marker"], sr["reference"]) == ("SR", "#1f77b4", "o", False)
    assert (bon["method_name"], bon["color"], bon["marker"], bon["reference"]) == ("Best-of-N", "#ff7f0e", "s", True)
    assert sr["pair"] == "gen / rm"
    assert sr["perplexity"] == pytest.approx(2.0)  # of candidate 1, not the halted one
    assert (sr["score"], sr["time_s"], sr["shards"], sr["num_rounds"]) == (2.0, 3.0, 1, 1)
    assert failed_prompts(loaded).to_dict("records") == [
        {"prompt_id": "p2", "method": "sr", "error": "prompt too long"},
        {"prompt_id": "p3", "method": "sr", "error": "no complete response"},
    ]


def test_a_run_file_holding_a_prompt_twice_is_refused(tmp_path):
    path = tmp_path / "twice.jsonl"
    path.write_text(json.dumps(SR_RECORD) + "\n" + json.dumps(SR_RECORD) + "\n")
    with pytest.raises(SpecrejError, match="twice"):
        load_trajectories(path)


def test_worst_score_is_the_recorded_one():
    assert best_responses_frame([SR_RECORD])["worst_score"].tolist() == [1.0]
    # merged BoN shards keep only the chosen candidate but the lowest score over every shard
    merged = {**BON_RECORD, "worst": {"candidate_id": 7, "score": -3.0}}
    assert best_responses_frame([merged])["worst_score"].tolist() == [-3.0]
    assert math.isnan(best_responses_frame([{**SR_RECORD, "worst": None}])["worst_score"].item())


def test_best_candidate_falls_back_to_the_highest_unhalted_final_score():
    without_id = {**SR_RECORD, "best": {"text": "response 1", "score": 2.0, "num_tokens": 2}}
    assert best_candidate(without_id)["id"] == 1


def test_prefix_table_is_checked_on_load(tmp_path):
    table = pd.DataFrame({"prompt_id": ["p"], "candidate_id": [0], "tau": [8], "partial_score": [0.1],
                          "final_score": [0.2], "num_tokens": [10], "finished_before_tau": [False]})
    table.to_parquet(tmp_path / "good.parquet")
    pd.testing.assert_frame_equal(load_prefix_table(tmp_path / "good.parquet"), table)
    table.drop(columns="tau").to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="tau"):
        load_prefix_table(tmp_path / "bad.parquet")


# --- settings: the configuration key ----------------------------------------------------------


def test_a_record_without_a_setting_is_refused_with_one_message():
    params = {k: v for k, v in SR_RECORD["params"].items() if k != "setting"}
    with pytest.raises(ValueError, match=r"prompt 'p1' has no params\['setting'\] with a method"):
        record_configuration({**SR_RECORD, "params": params})


def with_setting(record, name, params, label, **top):
    """``record`` with params.setting = {method: name, params, label} and no display."""
    kept = {key: value for key, value in record["params"].items() if key != "display"}
    return {**record, **top, "params": {**kept, "setting": {"method": name, "params": params, "label": label}}}


def test_records_with_a_setting_are_keyed_by_it():
    sr = with_setting(SR_RECORD, "sr", {"min_tokens": 8, "alpha": 0.5, "batch_size": None}, "SR α=0.5")
    adaptive = with_setting(SR_RECORD, "sr-adaptive", {"delta": 0.1, "alpha": 0.5}, "SR δ=0.1")  # method stays "sr"
    control = with_setting(SR_RECORD, "sr-random", {"alpha": 0.5}, "Random SR α=0.5", method="sr-random")
    other = with_setting(SR_RECORD, "first-k", {"n": 3, "k": 2}, "First 2 of 3", method="first-k")
    # keys sorted, no spaces: the same setting gives the same text whatever order it was written in
    assert record_configuration(sr) == ("sr", 8, '{"alpha":0.5,"batch_size":null,"min_tokens":8}', "SR α=0.5")
    assert record_configuration(adaptive) == ("sr-adaptive", 8, '{"alpha":0.5,"delta":0.1}', "SR δ=0.1")
    assert record_configuration(control) == ("sr-random", 8, '{"alpha":0.5}', "Random SR α=0.5")
    no_batch = {**other, "params": {k: v for k, v in other["params"].items() if k != "init_batch_size"}}
    method, n, setting, label = record_configuration(no_batch)
    assert (method, setting, label) == ("first-k", '{"k":2,"n":3}', "First 2 of 3") and math.isnan(n)
    runs = best_responses_frame([sr, adaptive, control, no_batch])
    assert runs["method"].tolist() == ["sr", "sr-adaptive", "sr-random", "first-k"]
    assert runs["method_label"].tolist() == ["SR α=0.5", "SR δ=0.1", "Random SR α=0.5", "First 2 of 3"]


def test_a_bon_record_merged_from_shards_is_keyed_by_its_total_n():
    # specrej.records.shards.merge_shards: params.n and the setting's n are the total (32); the key is N alone.
    shard = with_setting(BON_RECORD, "bon", {"n": 8, "batch_size": 4}, "Bo8")
    shard["params"] = {**shard["params"], "n": 8}
    merged = with_setting(BON_RECORD, "bon", {"n": 32, "batch_size": 4}, "Bo32")  # as merge_shards writes it
    merged["params"] = {**merged["params"], "n": 32, "shards": 4, "shard_size": 8}
    merged["flops"] = {"prefill": 10, "generate": 60, "reward": 30, "total": 100}
    assert record_configuration(merged) == ("bon", 32, '{"n":32}', "Bo32")
    assert record_configuration(shard) == ("bon", 8, '{"n":8}', "Bo8")
    assert record_configuration({**BON_RECORD, "params": {**BON_RECORD["params"], "n": 8}})[2] == '{"n":8}'
    row = best_responses_frame([merged]).iloc[0]
    assert (row["method_label"], row["flops"], row["shards"]) == ("Bo32", 100.0, 4)


def test_records_without_display_get_the_fallback_names_colours_markers_and_reference():
    from analysis.settings import FALLBACK_COLORS

    bon = with_setting(BON_RECORD, "bon", {"n": 16}, "Bo16")
    first = with_setting(SR_RECORD, "first-k", {"k": 2}, "First 2", method="first-k")
    sr = SR_RECORD  # declares its display, colour FALLBACK_COLORS[0]: the fallback ones skip it
    runs = best_responses_frame([first, sr, bon, {**first, "prompt_id": "p2"}])
    assert runs["method_name"].tolist() == ["first-k", "SR", "bon", "first-k"]
    assert runs["color"].tolist() == [FALLBACK_COLORS[1], "#1f77b4", FALLBACK_COLORS[2], FALLBACK_COLORS[1]]
    assert runs["marker"].tolist() == ["o", "o", "o", "o"]
    assert runs["reference"].tolist() == [False, False, True, False]
    assert record_configuration(bon) == ("bon", 16, '{"n":16}', "Bo16")  # the fallback reference is keyed by N
    # a method declared without a colour: its name, the next free colour
    beside = {**first, "params": {**first["params"], "display": {"name": "First-k", "color": "", "marker": "^",
                                                                  "reference": False}}}
    runs = best_responses_frame([sr, beside])
    assert runs[["method_name", "color", "marker"]].values.tolist() == [
        ["SR", "#1f77b4", "o"], ["First-k", FALLBACK_COLORS[1], "^"]]


def test_failed_records_name_the_settings_method():
    failed = with_setting(FAILED_RECORD, "sr-adaptive", {"delta": 0.1}, "SR δ=0.1")
    unknown = {"prompt_id": "p9", "prompt": "?", "method": "beam", "params": {}, "error": "boom"}
    assert failed_prompts([failed, unknown])["method"].tolist() == ["sr-adaptive", "beam"]
