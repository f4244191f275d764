"""Notes written under the Markdown and LaTeX tables: why cells are empty, which prompts were
left out because they failed."""

import pandas as pd


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
    if not notes:
        return
    with open(markdown, "a", encoding="utf-8") as out:
        out.write("\n" + "\n\n".join(f"*{note}*" for note in notes) + "\n")
    with open(latex, "a", encoding="utf-8") as out:
        out.write("".join(f"% {note}\n" for note in notes))
