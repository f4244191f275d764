"""The notes the workflow writes under its tables."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow" / "scripts"))
from table_notes import failed_note, no_response_rows, zero_spread_note  # noqa: E402


def test_zero_spread_prompts_are_named_per_pair_and_absent_otherwise():
    summary = pd.DataFrame({"pair": ["A", "A", "B"], "zero_spread_prompts": ["p3,p9", "p3,p9", None]})
    note = zero_spread_note(summary)
    assert "A: p3,p9" in note and "B:" not in note and "eq. 8" in note
    assert zero_spread_note(summary.assign(zero_spread_prompts="")) == ""


def write_failed(path, rows):
    columns = ["pair", "generator", "reward", "run", "prompt_id", "method", "method_label", "run_answered", "error"]
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)
    return str(path)


def test_a_setting_without_any_response_is_named_as_such_not_as_excluding_every_prompt(tmp_path):
    """Hand-made failed_prompts.csv: DeepConf answered none of prompts a, b (run_answered 0); SR
    failed on prompt b only (it answered a). Only b is excluded; DeepConf is a row of its own."""
    failed = write_failed(tmp_path / "failed.csv", [
        ["G / R", "G", "R", "runs/dc.jsonl", "a", "deepconf", "DeepConf N=32", 0, "no complete response"],
        ["G / R", "G", "R", "runs/dc.jsonl", "b", "deepconf", "DeepConf N=32", 0, "no complete response"],
        ["G / R", "G", "R", "runs/sr.jsonl", "b", "sr", "SR α=0.5", 1, "too long"],
        ["H / R", "H", "R", "runs/h.jsonl", "a", "sr", "SR α=0.5", 0, "too long"],
    ])
    note = failed_note(failed, ["G / R"])
    assert "left out of every method of that pair; see " + failed + "): b (too long)." in note
    assert "a (" not in note  # DeepConf's failures exclude no prompt
    assert "Method settings with no complete response on any prompt" in note
    assert note.endswith("DeepConf N=32 (G / R: no complete response).")
    rows = no_response_rows(failed, ["G / R"])
    assert rows.to_dict("records") == [{"generator": "G", "method_label": "DeepConf N=32",
                                        "status": "no complete response on any prompt"}]
    assert failed_note(failed, ["X / R"]) == ""
