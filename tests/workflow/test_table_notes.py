"""The notes the workflow writes under its tables."""

import os
import subprocess
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
    assert rows.to_dict("records") == [{"pair": "G / R", "generator": "G", "method_label": "DeepConf N=32",
                                        "status": "no complete response on any prompt"}]
    assert failed_note(failed, ["X / R"]) == ""


ROOT = Path(__file__).resolve().parents[2]


def test_table2_is_written_when_a_method_answers_nothing_under_two_rewards_of_one_generator(tmp_path):
    """workflow/scripts/table2.py on a hand-made summary and failed_prompts.csv: one generator G, two
    rewards (pairs G / R1, G / R2); DeepConf completed no response on any prompt under either, SR
    under R1 only. The job used to fail in the pivot ("Index contains duplicate entries") and write
    no Table 2; now each method has its row, "--" where it has no value, and its CSV status says where."""
    summary = tmp_path / "summary.csv"
    pd.DataFrame({"pair": ["G / R1", "G / R2", "G / R2"], "generator": ["G"] * 3, "reward": ["R1", "R2", "R2"],
                  "method_label": ["Bo8", "Bo8", "SR α=0.5"], "perplexity": [3.0, 3.1, 2.6],
                  "speedup_vs_largest_bon": [1.0, 1.0, 5.0]}).to_csv(summary, index=False)
    failed = write_failed(tmp_path / "failed.csv", [
        [pair, "G", pair[-2:], f"runs/{pair[-2:]}/dc.jsonl", prompt, "deepconf", "DeepConf N=8", 0,
         "no complete response"] for pair in ("G / R1", "G / R2") for prompt in ("a", "b")
    ] + [["G / R1", "G", "R1", "runs/R1/sr.jsonl", prompt, "sr", "SR α=0.5", 0, "no complete response"]
         for prompt in ("a", "b")])
    stem = tmp_path / "tables" / "table2"
    runner = ("import runpy, types\n"
              "ns = types.SimpleNamespace\n"
              "smk = ns(input=ns(summary=%r, failed=%r), output=ns(csv=%r, md=%r, tex=%r),\n"
              "         params=ns(pairs=['G / R1', 'G / R2'], reward=['R1', 'R2']), log=[%r], scriptdir=%r)\n"
              "runpy.run_path(%r, init_globals={'snakemake': smk})\n")
    script = ROOT / "workflow" / "scripts" / "table2.py"
    args = (str(summary), failed, f"{stem}.csv", f"{stem}.md", f"{stem}.tex", str(tmp_path / "table2.log"),
            str(script.parent), str(script))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", runner % args], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr + (tmp_path / "table2.log").read_text()
    table = pd.read_csv(f"{stem}.csv", index_col="Method")
    assert table.index.tolist() == ["Bo8", "SR α=0.5", "DeepConf N=8"]
    assert table.loc["SR α=0.5", "G / R2 Speedup"] == 5.0 and pd.isna(table.loc["SR α=0.5", "G / R1 Speedup"])
    assert table.loc["DeepConf N=8"].drop("status").isna().all()
    assert table["status"].fillna("").tolist() == [
        "", "no complete response on any prompt (G / R1)", "no complete response on any prompt (G / R1, G / R2)"]
    markdown = Path(f"{stem}.md").read_text()
    assert "| DeepConf N=8 |" in markdown and "DeepConf N=8 (G / R2: no complete response)" in markdown
