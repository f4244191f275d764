"""Notes written under the Markdown and LaTeX tables: why cells are empty, which prompts were
left out because they failed."""

import pandas as pd

from analysis.tables import append_notes


def failed_note(failed_csv: str, pairs: list[str]) -> str:
    """One sentence naming the prompts that failed in the runs of `pairs` (empty if none)."""
    failed = pd.read_csv(failed_csv, dtype={"prompt_id": str})
    failed = failed[failed["pair"].isin(pairs)]
    if failed.empty:
        return ""
    prompts = ", ".join(f"{pid} ({'; '.join(sorted(set(group['error'])))})"
                        for pid, group in failed.groupby("prompt_id", sort=False))
    return (f"Excluded prompts (failed in at least one run, so left out of every method of that pair; "
            f"see {failed_csv}): {prompts}.")


def zero_spread_note(summary: pd.DataFrame) -> str:
    """One sentence naming, per pair, the prompts whose eq. 8 score is undefined (empty if none)."""
    named = summary.drop_duplicates("pair")
    named = named[named["zero_spread_prompts"].fillna("").astype(str) != ""]
    if named.empty:
        return ""
    listed = "; ".join(f"{row.pair}: {row.zero_spread_prompts}" for row in named.itertuples())
    return (f"Zero-spread prompts (Bo-N_min's candidate rewards all equal, so the eq. 8 score is undefined "
            f"there and left out of its mean; the other columns use them): {listed}.")


def add_notes(markdown: str, latex: str, notes: list[str]) -> None:
    """Each note in italics under the Markdown table, as a comment under the LaTeX one."""
    if notes:
        append_notes(markdown, latex, [line for note in notes for line in ("", f"*{note}*")])
