"""Eq. 7's compute modelled from the records' steps: the runs frame's columns, the per-file check,
and a study costed on another calibration (analysis.costs)."""

import json

import numpy as np
import pandas as pd
import pytest

from analysis import costs
from analysis.io import best_responses_frame
from analysis.modelled_compute import (check_sentence, compute_check, repeat_calibrations, widened_by_repeats,
                                      with_eq7_compute)

# one row of 1 s per step whatever its rows and context; prefill 1 s; sampling and scoring free
FLAT = {"forward": {"plain": {"rows": [1, 128], "contexts": [1, 1000], "seconds": [[1.0, 1.0], [1.0, 1.0]]}},
        "sample": {"plain": {"rows": [1, 128], "seconds": [0.0, 0.0]}},
        "prefill": {"tokens": [1, 1000], "seconds": [1.0, 1.0]}, "score": None}
# seconds proportional to the rows fed: 0.1 s per row
PER_ROW = {**FLAT, "forward": {"plain": {"rows": [1, 128], "contexts": [1, 1000],
                                         "seconds": [[0.1, 0.1], [12.8, 12.8]]}}}


def record(prompt_id, method, setting, label, steps, compute_s, score, shards=1, n=None):
    params = {"model": "m", "reward": "r", "setting": {"method": method, "params": setting, "label": label}}
    if method == "bon":
        params.update(n=n, shards=shards)
    return {"prompt_id": prompt_id, "method": method, "params": params,
            "best": {"candidate_id": 0, "score": score, "num_tokens": 1}, "worst": {"score": score - 1.0},
            "candidates": [{"id": 0, "token_logprobs": [-1.0]}], "rounds": [],
            "timing": {"total_s": compute_s, "compute_s": compute_s, "threads": 1},
            "tokens": {"generated": 1, "scored": 1}, "steps": steps}


def test_modelled_seconds_are_the_steps_on_the_calibration_per_shard():
    # Bo16 of two shards, each one prefill and 4 steps of 16 rows: 2 x (1 + 4) = 10 s flat; per shard 5
    steps = {"prefill": [10, 10], "decode": [[16, 16, 11, 4, "plain"]] * 2, "scored": []}
    frame = best_responses_frame([record(0, "bon", {"n": 32}, "Bo32", steps, 7.0, 1.0, shards=2, n=32)], FLAT)
    assert frame.loc[0, "modelled_s"] == 5.0 and frame.loc[0, "cpu_s"] == 7.0 and frame.loc[0, "work_s"] == 7.0
    assert with_eq7_compute(frame, "modelled").loc[0, "work_s"] == 5.0
    assert np.isnan(with_eq7_compute(frame, "work").loc[0, "cpu_s"])  # no second column of the same seconds
    assert np.isnan(best_responses_frame([record(0, "bon", {"n": 32}, "Bo32", None, 7.0, 1.0, n=32)], FLAT)
                    .loc[0, "modelled_s"])
    with pytest.raises(ValueError, match="no step profile"):
        with_eq7_compute(best_responses_frame([record(0, "bon", {"n": 32}, "Bo32", None, 7.0, 1.0, n=32)], FLAT),
                         "modelled")


def test_the_check_sums_each_run_file_and_names_one_outside_the_range():
    runs = pd.DataFrame({"run": ["a", "a", "b"], "method_label": ["Bo16", "Bo16", "SR"], "prompt_id": [0, 1, 0],
                         "shards": [2, 2, 1], "cpu_s": [1.0, 2.0, 3.0], "modelled_s": [1.0, 1.0, 2.0]})
    check = compute_check(runs).set_index("run")
    # a: 2 x (1 + 2) = 6 measured against 2 x (1 + 1) = 4 modelled: 1.5, outside; b: 3 / 2 = 1.5 too
    assert check.loc["a", "cpu_s"] == 6.0 and check.loc["a", "modelled_s"] == 4.0 and check.loc["a", "ratio"] == 1.5
    assert check["outside"].all()
    assert "outside [0.8, 1.25]: Bo16 1.50, SR 1.50" in check_sentence(check.reset_index())
    inside = compute_check(runs.assign(cpu_s=runs["modelled_s"] * 1.1))
    assert check_sentence(inside) == "Measured / modelled compute per run file: 1.10-1.10, all inside [0.8, 1.25]."


def test_a_study_costed_on_another_calibration(tmp_path, capsys):
    # Bo16 (one batch of 16 rows), Bo32 (two shards of it) and SR (32 rows for 2 steps, then 8 rows
    # for 2), 2 prompts, 4 steps each: flat, every run costs 1 + 4 s per batch; per row, Bo16 costs
    # 1 + 4 x 1.6 = 7.4 per prompt, SR 1 + 2 x 3.2 + 2 x 0.8 = 9.0
    bon = {"prefill": [10], "decode": [[16, 16, 11, 4, "plain"]], "scored": []}
    sr = {"prefill": [10], "decode": [[32, 32, 11, 2, "plain"], [8, 8, 13, 2, "plain"]], "scored": []}
    files = {"bo16": [record(p, "bon", {"n": 16}, "Bo16", bon, 1.0, 1.0, n=16) for p in (0, 1)],
             "bo32": [record(p, "bon", {"n": 32}, "Bo32", {**bon, "prefill": [10, 10], "decode": bon["decode"] * 2},
                             2.0, 2.0, shards=2, n=32) for p in (0, 1)],
             "sr": [record(p, "sr", {"alpha": 0.5}, "SR α=0.5", sr, 1.0, 1.5) for p in (0, 1)]}
    rows = []
    for name, records in files.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        rows += [{"run": str(path), "pair_key": "m--r", "pair": "m / r", "generator": "m", "reward": "r",
                  "prompt_id": r["prompt_id"]} for r in records]
    (tmp_path / "metrics").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "metrics/runs.csv", index=False)
    for calibration, sr_ratio in ((FLAT, 1.0), (PER_ROW, 9.0 / 7.4)):
        path = tmp_path / "calibration.json"
        path.write_text(json.dumps(calibration))
        out = tmp_path / "costed.csv"
        assert costs.main([str(tmp_path), "--calibration", str(path), "--resamples", "10", "--out", str(out)]) == 0
        table = pd.read_csv(out).set_index("method_label")
        assert table.loc["SR α=0.5", "relative_compute"] == pytest.approx(sr_ratio)
        assert table.loc["Bo32", "relative_compute"] == pytest.approx(2.0)
    assert "Costed on:" in capsys.readouterr().out
    assert costs.main([str(tmp_path / "nowhere"), "--calibration", str(path)]) == 2


def test_each_repeat_of_a_calibration_costs_the_steps_alone():
    # forward 1 s a step in repeat 1, 3 s in repeat 2 (median 2); prefill 1 s, then 2 s
    calibration = {"repeats": 2,
                   "forward": {"plain": {"rows": [1, 128], "contexts": [1, 1000], "seconds": [[2.0, 2.0], [2.0, 2.0]],
                                         "by_repeat": [[[1.0, 3.0], [1.0, 3.0]], [[1.0, 3.0], [1.0, 3.0]]]}},
                   "sample": {"plain": {"rows": [1, 128], "seconds": [0.0, 0.0], "by_repeat": [[0.0, 0.0], [0.0, 0.0]]}},
                   "prefill": {"tokens": [1, 1000], "seconds": [1.5, 1.5], "by_repeat": [[1.0, 2.0], [1.0, 2.0]]},
                   "score": None}
    steps = {"prefill": [10], "decode": [[16, 16, 11, 4, "plain"]], "scored": []}  # one prefill, 4 steps
    costed = [best_responses_frame([record(0, "sr", {}, "SR", steps, 9.0, 1.0)], c).loc[0, "modelled_s"]
              for c in [calibration, *repeat_calibrations(calibration)]]
    assert costed == [1.5 + 4 * 2.0, 1.0 + 4 * 1.0, 2.0 + 4 * 3.0]
    assert repeat_calibrations({**FLAT, "repeats": 3}) == []  # no repeats kept: none to cost on


def test_intervals_widen_to_hold_every_repeats_and_a_bound_stays_a_bound():
    keys = ["pair_key", "method_label"]
    main = pd.DataFrame({"pair_key": ["p", "p"], "method_label": ["SR", "Bo32"], "compute_speedup": [3.0, np.nan],
                         "compute_speedup_lo": [2.0, np.nan], "compute_speedup_hi": [4.0, np.nan],
                         "compute_speedup_hi_is_bound": [False, False], "relative_compute": [2.0, 2.0],
                         "relative_compute_lo": [1.9, 2.0], "relative_compute_hi": [2.1, 2.0]})
    # the same rows in another order, each repeat's estimates
    first = main.iloc[::-1].assign(compute_speedup=[np.nan, 2.8], compute_speedup_lo=[np.nan, 1.8],
                                   compute_speedup_hi=[np.nan, 3.9], relative_compute_lo=[2.0, 1.95])
    second = main.assign(compute_speedup=[3.3, np.nan], compute_speedup_hi=[4.5, np.nan],
                         compute_speedup_hi_is_bound=[True, False], relative_compute_hi=[2.2, 2.0])
    widened = widened_by_repeats(main, [first, second], keys).set_index("method_label")
    assert widened.loc["SR", ["compute_speedup", "compute_speedup_lo", "compute_speedup_hi"]].tolist() == [3.0, 1.8, 4.5]
    assert widened.loc["SR", "compute_speedup_hi_is_bound"] and not widened.loc["Bo32", "compute_speedup_hi_is_bound"]
    assert widened.loc["SR", ["compute_speedup_repeats_lo", "compute_speedup_repeats_hi"]].tolist() == [2.8, 3.3]
    assert widened.loc["SR", ["relative_compute_lo", "relative_compute_hi"]].tolist() == [1.9, 2.2]
    assert widened.loc["Bo32", ["relative_compute_lo", "relative_compute_hi"]].tolist() == [2.0, 2.0]
    assert widened_by_repeats(main, [], keys) is main
