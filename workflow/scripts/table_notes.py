"""Notes written under the Markdown and LaTeX tables: why cells are empty, which prompts were
left out because they failed."""

import pandas as pd

from analysis.tables import append_notes


def failed_note(failed_csv: str, pairs: list[str]) -> str:
    """One sentence naming the prompts that failed in the runs of `pairs` (empty if none)."""
    failed = pd.read_csv(failed_csv, dtype={"prompt_id": str})
    failed = failed[failed["pair"].isin(pairs) & ~failed["run"].str.endswith("/correlation.jsonl")]
    if failed.empty:
        return ""
    prompts = ", ".join(f"{pid} ({'; '.join(sorted(set(group['error'])))})"
                        for pid, group in failed.groupby("prompt_id", sort=False))
    return (f"Excluded prompts (failed in at least one run, so left out of every method of that pair; "
            f"see results/failed_prompts.csv): {prompts}.")


def add_notes(markdown: str, latex: str, notes: list[str]) -> None:
    """Each note in italics under the Markdown table, as a comment under the LaTeX one."""
    if notes:
        append_notes(markdown, latex, [line for note in notes for line in ("", f"*{note}*")])
