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
SR_RECORD = {
    "prompt_id": "p1", "prompt": "Hi", "method": "sr",
    "params": {"alpha": 0.5, "init_batch_size": 8, "seed": 0, "model": "gen", "reward": "rm"},
    "best": {"candidate_id": 1, "text": "response 1", "score": 2.0, "num_tokens": 2},
    "candidates": [
        candidate(0, None, [0.9, 0.9, 0.9], halted_round=0),  # halted: no final score
        candidate(1, 2.0, [0.5, 0.5]),  # the answer: perplexity 2
        candidate(2, 1.0, [0.1]),
    ],
    "rounds": [{"decision_token": 4, "batch_before": 8, "batch_after": 4, "cutoff": 0.3}],
    "timing": {"total_s": 3.0, "generate_s": 2.0, "score_s": 1.0},
    "tokens": {"generated": 40, "scored": 20}, "peak_kv_bytes": 1024,
}
BON_RECORD = {**SR_RECORD, "method": "bon", "rounds": [],
              "params": {"n": 16, "batch_size": 8, "seed": 0, "model": "gen", "reward": "rm"}}
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
    assert math.isnan(sr["flops"]) and math.isnan(bon["flops"])  # older records: no FLOP count
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


def test_worst_score_is_recorded_or_the_lowest_final_score():
    # Older records: the lowest final score among candidates that have one (the halted one has none).
    assert best_responses_frame([SR_RECORD])["worst_score"].tolist() == [1.0]
    # Newer records (and merged BoN shards, which keep only the chosen candidate) carry it.
    merged = {**BON_RECORD, "worst": {"candidate_id": 7, "score": -3.0}}
    assert best_responses_frame([merged])["worst_score"].tolist() == [-3.0]
    no_scores = {**SR_RECORD, "candidates": [candidate(0, None, [0.5], halted_round=0)]}
    assert math.isnan(best_responses_frame([no_scores])["worst_score"].item())


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


def test_records_without_a_setting_keep_todays_labels():
    """Files written before settings: the configuration is derived, with exactly the old labels."""
    adaptive = {**SR_RECORD, "params": {**SR_RECORD["params"], "alpha": 0.5,
                                        "rejection": {"rule": "adaptive", "delta": 0.05, "fallback_alpha": 0.5}}}
    fixed_by_rule = {**SR_RECORD, "params": {**SR_RECORD["params"], "alpha": 0.25, "rejection": {"rule": "alpha"}}}
    bon_120 = {**BON_RECORD, "params": {**BON_RECORD["params"], "n": 120}}
    assert record_configuration(bon_120) == ("bon", 120, '{"n":120}', "Bo120")
    assert record_configuration(SR_RECORD) == ("sr", 8, '{"alpha":0.5}', "SR α=0.5")
    assert record_configuration(fixed_by_rule) == ("sr", 8, '{"alpha":0.25}', "SR α=0.25")
    assert record_configuration(adaptive) == ("sr-adaptive", 8, '{"delta":0.05}', "SR δ=0.05")
    runs = best_responses_frame([bon_120, SR_RECORD, adaptive])
    assert runs["method_label"].tolist() == ["Bo120", "SR α=0.5", "SR δ=0.05"]
    assert runs["method"].tolist() == ["bon", "sr", "sr-adaptive"]


def with_setting(record, name, params, label, **top):
    """``record`` as the engine now writes it: params.setting = {method: name, params, label}."""
    return {**record, **top, "params": {**record["params"], "setting": {"method": name, "params": params,
                                                                        "label": label}}}


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
    # specrej.records.io.merge_shards keeps the first shard's params: params.n is the total (32), the
    # setting may still name the shard (8); shard files and merged files must agree on the key.
    shard = with_setting(BON_RECORD, "bon", {"n": 8, "batch_size": 4}, "Bo8")
    shard["params"] = {**shard["params"], "n": 8}
    merged = with_setting(BON_RECORD, "bon", {"n": 8, "batch_size": 4}, "Bo8")
    merged["params"] = {**merged["params"], "n": 32, "shards": 4, "shard_size": 8}
    merged["flops"] = {"prefill": 10, "generate": 60, "reward": 30, "total": 100}
    assert record_configuration(merged) == ("bon", 32, '{"n":32}', "Bo32")
    assert record_configuration(shard) == ("bon", 8, '{"n":8}', "Bo8")
    assert record_configuration({**BON_RECORD, "params": {**BON_RECORD["params"], "n": 8}})[2] == '{"n":8}'
    row = best_responses_frame([merged]).iloc[0]
    assert (row["method_label"], row["flops"], row["shards"]) == ("Bo32", 100.0, 4)


def test_failed_records_name_the_settings_method():
    failed = with_setting(FAILED_RECORD, "sr-adaptive", {"delta": 0.1}, "SR δ=0.1")
    unknown = {"prompt_id": "p9", "prompt": "?", "method": "beam", "params": {}, "error": "boom"}
    assert failed_prompts([failed, unknown])["method"].tolist() == ["sr-adaptive", "beam"]
    with pytest.raises(ValueError, match="unknown method 'beam'"):
        record_configuration({**unknown, "best": {"score": 1.0}})
