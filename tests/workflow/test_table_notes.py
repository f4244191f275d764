"""The notes the workflow writes under its tables."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow" / "scripts"))
from table_notes import zero_spread_note  # noqa: E402


def test_zero_spread_prompts_are_named_per_pair_and_absent_otherwise():
    summary = pd.DataFrame({"pair": ["A", "A", "B"], "zero_spread_prompts": ["p3,p9", "p3,p9", None]})
    note = zero_spread_note(summary)
    assert "A: p3,p9" in note and "B:" not in note and "eq. 8" in note
    assert zero_spread_note(summary.assign(zero_spread_prompts="")) == ""
