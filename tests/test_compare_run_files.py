"""benchmarks/compare_run_files.py's token and interval reports, on hand-made records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import compare_run_files


def record(prompt_id: str, best: int, candidates: dict[int, list[int]]) -> dict:
    return {"prompt_id": prompt_id, "best": {"candidate_id": best},
            "candidates": [{"id": i, "token_ids": tokens} for i, tokens in candidates.items()]}


def test_tokens_agree_up_to_each_candidates_first_difference():
    before = [record("a", 0, {0: [5, 6, 7, 8], 1: [1, 2, 3]}), record("b", 2, {2: [9, 9]})]
    # a/0 the same; a/1 differs at position 1; b/2 is a prefix of the longer new stream; candidate 3
    # and prompt c are on one side only
    after = [record("b", 3, {2: [9, 9, 4], 3: [1]}), record("a", 0, {0: [5, 6, 7, 8], 1: [1, 4, 3]}),
             record("c", 0, {0: [1]})]
    agreement = compare_run_files.token_agreement(before, after)
    # by hand: candidates a/0, a/1, b/2; tokens 4 + 3 + 2 = 9, shared 4 + 1 + 2 = 7
    assert agreement == {"candidates": 3, "identical": 1, "tokens": 9, "shared": 7,
                         "first_difference": [1, 2], "best_changed": 1}


def test_estimates_are_checked_against_the_before_intervals():
    key = {"pair_key": "p", "method": "sr", "setting": '{"alpha":0.5}', "method_label": "SR"}
    before = pd.DataFrame([{**key, "improvement": 110.0, "improvement_lo": 105.0, "improvement_hi": 115.0,
                            "relative_flops": 0.5, "relative_flops_lo": float("nan"), "relative_flops_hi": float("nan"),
                            "flops_speedup_vs_largest_bon": 4.0, "flops_speedup_vs_largest_bon_lo": 3.0,
                            "flops_speedup_vs_largest_bon_hi": 5.0}])
    after = before.assign(improvement=116.0, flops_speedup_vs_largest_bon=3.5)
    table = compare_run_files.summary_against_intervals(before, after)
    # relative_flops has no interval, so it is not checked
    assert table[["estimate", "after", "inside"]].values.tolist() == [
        ["improvement", 116.0, False], ["flops_speedup_vs_largest_bon", 3.5, True]]


def test_the_command_reports_and_exits_on_the_intervals(tmp_path, capsys):
    for side, tokens, improvement in (("before", [1, 2, 3], 110.0), ("after", [1, 2, 4], 112.0)):
        runs = tmp_path / side / "runs/pair/sr/alpha0.5"
        runs.mkdir(parents=True)
        (runs / "chunk0000.jsonl").write_text(json.dumps(record("a", 0, {0: tokens})) + "\n")
        (tmp_path / side / "metrics").mkdir()
        pd.DataFrame([{"pair_key": "p", "method": "sr", "setting": "s", "method_label": "SR",
                       "improvement": improvement, "improvement_lo": 100.0, "improvement_hi": 111.0}]
                     ).to_csv(tmp_path / side / "metrics/summary.csv", index=False)
    status = compare_run_files.main([str(tmp_path / "before"), str(tmp_path / "after"), "--tokens", "--summary"])
    out = capsys.readouterr().out
    assert "DIFFERS runs/pair/sr/alpha0.5/chunk0000.jsonl: candidates" in out
    assert "all: 0/1 candidates identical; 2/3 tokens (66.7%)" in out
    assert "0 of 1 inside" in out and status == 1


def compute_summary(computes: dict[tuple[str, str], float]) -> pd.DataFrame:
    return pd.DataFrame([{"pair_key": "g--r", "method": method, "setting": setting, "method_label": f"{method} {setting}",
                          "relative_compute": value} for (method, setting), value in computes.items()])


def test_two_runs_compute_is_compared_setting_by_setting_and_within_a_run(tmp_path, capsys):
    before = compute_summary({("bon", "n32"): 2.0, ("sr", "alpha0.5"): 2.5, ("sr-random", "alpha0.5"): 2.55})
    after = compute_summary({("bon", "n32"): 2.08, ("sr", "alpha0.5"): 2.5, ("sr-random", "alpha0.5"): 2.5})
    agreement = compare_run_files.compute_agreement(before, after)
    assert agreement["ratio"].round(4).tolist() == [1.04, 1.0, round(2.5 / 2.55, 4)]
    pairs = compare_run_files.same_setting_pairs(before)
    assert pairs[["setting", "first", "second"]].values.tolist() == [["alpha0.5", "sr alpha0.5", "sr-random alpha0.5"]]
    assert pairs["ratio"].iloc[0] == 2.55 / 2.5
    for folder, summary in (("before", before), ("after", after)):
        (tmp_path / folder / "metrics").mkdir(parents=True)
        summary.to_csv(tmp_path / folder / "metrics" / "summary.csv", index=False)
    assert compare_run_files.print_compute_report(tmp_path / "before", tmp_path / "after", 0.05)
    assert not compare_run_files.print_compute_report(tmp_path / "before", tmp_path / "after", 0.03)  # bon: 4%
    assert "x1.040  OUTSIDE" in capsys.readouterr().out


def test_the_headline_speedup_is_compared_setting_by_setting(tmp_path, capsys):
    """metrics/headline.csv as the workflow writes it (one row per method and setting, `compute_speedup`,
    NaN outside the Best-of-N range, `best` marking the method's best setting)."""
    summary = compute_summary({("bon", "n16"): 1.0, ("sr", "alpha0.5"): 1.5})
    speedups = {"before": [4.0, 5.0, float("nan")], "after": [4.1, 4.5, float("nan")]}
    for folder in ("before", "after"):
        (tmp_path / folder / "metrics").mkdir(parents=True)
        summary.to_csv(tmp_path / folder / "metrics" / "summary.csv", index=False)
        pd.DataFrame({"pair": "g / r", "method": ["sr", "sr", "st-bon"], "setting": ["alpha0.5", "alpha0.7", "n32"],
                      "method_label": ["SR 0.5", "SR 0.7", "ST-BoN 32"], "best": [False, True, True],
                      "compute_speedup": speedups[folder]}).to_csv(tmp_path / folder / "metrics" / "headline.csv",
                                                                   index=False)
    assert not compare_run_files.print_compute_report(tmp_path / "before", tmp_path / "after", 0.05)
    out = capsys.readouterr().out
    # by hand: 4.1 / 4.0 = 1.025 (inside 5%), 4.5 / 5.0 = 0.9 (outside); ST-BoN has no speedup in either run
    assert "SR 0.5" in out and "x1.025\n" in out and "*SR 0.7" in out and "x0.900  OUTSIDE" in out
    assert "ST-BoN 32" not in out
    assert compare_run_files.print_compute_report(tmp_path / "before", tmp_path / "after", 0.11)
