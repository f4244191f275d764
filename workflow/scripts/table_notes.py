"""Notes written under the Markdown and LaTeX tables: why cells are empty, which prompts were
left out because they failed, which method settings completed no response at all."""

import pandas as pd

from analysis.tables import NO_RESPONSE, append_notes, unanswered_runs


def failed_note(failed_csv: str, pairs: list[str]) -> str:
    """What failed in the runs of `pairs` and what was done about it (empty if nothing failed):
    the prompts that failed in a run that answered others (left out of every method of the pair),
    and the method settings that completed no response on any prompt (rows of "--" that this
    note names; they leave out no prompt, having no scores to compare on)."""
    failed = pd.read_csv(failed_csv, dtype={"prompt_id": str})
    failed = failed[failed["pair"].isin(pairs)]
    silent = unanswered_runs(failed)
    partial = failed[~failed["run"].isin(silent["run"])]
    notes = []
    if not partial.empty:
        prompts = ", ".join(f"{pid} ({'; '.join(sorted(set(group['error'])))})"
                            for pid, group in partial.groupby("prompt_id", sort=False))
        notes.append(f"Excluded prompts (failed in at least one run, so left out of every method of that pair; "
                     f"see {failed_csv}): {prompts}.")
    if not silent.empty:
        settings = ", ".join(f"{row.method_label} ({row.pair}: {row.error})" for row in silent.itertuples())
        notes.append(f"Method settings with {NO_RESPONSE} (nothing to score: their rows read \"--\"; they "
                     f"exclude no prompt from the other methods; see {failed_csv}): {settings}.")
    return " ".join(notes)


def no_response_rows(failed_csv: str, pairs: list[str]) -> pd.DataFrame:
    """pair, generator, method_label and status of each method setting of `pairs` that completed no
    response (``analysis.tables.unanswered_runs``): the rows a table adds for them (the pair places
    such a row where a table's columns are per pair: several rewards of one generator)."""
    failed = pd.read_csv(failed_csv, dtype={"prompt_id": str})
    silent = unanswered_runs(failed[failed["pair"].isin(pairs)])
    return silent[["pair", "generator", "method_label"]].assign(status=NO_RESPONSE)


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
