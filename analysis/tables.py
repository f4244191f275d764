"""The paper's Tables 1–2 as DataFrames, and writers for CSV, Markdown and LaTeX
(``write_table``; ``write_table1`` adds Table 1's judge, status and notes).

Both tables have one row per method setting (index named "Method": its ``method_label``, in
the order the labels first appear in the input, so the caller decides it) and, per generator,
one column per metric, named ``"<generator> <metric>"``, followed by ``"Average <metric>"``:
the mean over generators.  The average is NaN when a generator lacks that method, rather than an average
over a different set of generators than its neighbours.

Input contracts (one row per generator × method setting; ``method_label`` the setting's label,
``analysis.io.record_configuration``, e.g. "Bo120", "SR α=0.5", or any
method's own):

    Table 1: generator, method_label, win_rate, lc_win_rate
        win_rate / lc_win_rate: win-rate and length-controlled win-rate in percent against
        the Bo-N_min reference (which therefore scores 50).
    Table 2: generator, method_label, perplexity, speedup_vs_largest_bon, optionally
        flops_speedup_vs_largest_bon, and optionally perplexity_lo/hi, speedup_vs_largest_bon_lo/hi,
        flops_speedup_vs_largest_bon_lo/hi
        ``analysis.metrics.method_summary(runs, by=["generator"])`` output for runs under the
        log-prob reward: mean perplexity of the returned responses, compute speedup and FLOP
        speedup against the largest Best-of-N, with their bootstrap confidence intervals.

A metric given with ``<metric>_lo`` / ``<metric>_hi`` gets columns ``"<generator> <metric> lo"``
and ``"... hi"`` beside its own: the CSV keeps them as numbers, the Markdown and LaTeX show
"value [lo, hi]" in one cell (``with_intervals``).  Averages over generators have no interval:
the generators' bootstraps are separate, so no resample spans them.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis._columns import require_columns

TABLE1_METRICS = {"win_rate": "WR", "lc_win_rate": "LC WR"}
TABLE2_METRICS = {"perplexity": "PPL", "speedup_vs_largest_bon": "Speedup",
                  "flops_speedup_vs_largest_bon": "FLOP speedup"}
MISSING = "--"
INTERVAL_SUFFIXES = (" lo", " hi")
NOT_EVALUATED = "not evaluated"  # a Table 1 cell's note when it was not judged: "not evaluated: <reason>"
REFERENCE_NOTE = "reference: 50 by definition, not judged"  # the note of Table 1's reference row
# What the tables say of a method setting that completed no response on any prompt of a pair.
NO_RESPONSE = "no complete response on any prompt"


def table1_win_rates(win_rates: pd.DataFrame) -> pd.DataFrame:
    """Table 1: win-rate and length-controlled win-rate per method and generator, plus the average."""
    return _by_generator(win_rates, TABLE1_METRICS)


def table2_perplexity_speedup(summary: pd.DataFrame) -> pd.DataFrame:
    """Table 2: perplexity, speedup and FLOP speedup per method setting and generator, plus the
    average.  A summary without ``flops_speedup_vs_largest_bon`` (no FLOP counts) gets "--" there."""
    if "flops_speedup_vs_largest_bon" not in summary.columns:
        summary = summary.assign(flops_speedup_vs_largest_bon=np.nan)
    return _by_generator(summary, TABLE2_METRICS)


def unanswered_runs(failed: pd.DataFrame) -> pd.DataFrame:
    """The runs of results/failed_prompts.csv that answered no prompt (``run_answered`` 0): one
    row per run with pair, generator, method_label and its errors ("; "-joined). Such a setting
    has no row in the metrics, so it excludes no prompt from the other methods; the tables show
    it as a row that says ``NO_RESPONSE``. Empty for a file without ``run_answered``."""
    columns = ["pair", "generator", "method_label", "run", "error"]
    if failed.empty or "run_answered" not in failed.columns:
        return pd.DataFrame(columns=columns)
    silent = failed[failed["run_answered"] == 0]
    rows = [{"pair": group["pair"].iloc[0], "generator": group["generator"].iloc[0],
             "method_label": str(group["method_label"].iloc[0]), "run": run,
             "error": "; ".join(sorted(set(group["error"].astype(str))))}
            for run, group in silent.groupby("run", sort=False)]
    return pd.DataFrame(rows, columns=columns)


def with_intervals(table: pd.DataFrame, decimals: int = 1) -> pd.DataFrame:
    """Text cells: each column with "<column> lo" / "<column> hi" beside it becomes
    "value [lo, hi]" and loses those two; other numbers are formatted alone, NaN as "--"."""
    bounded = [c for c in table.columns if all(f"{c}{suffix}" in table.columns for suffix in INTERVAL_SUFFIXES)]
    bounds = {f"{c}{suffix}" for c in bounded for suffix in INTERVAL_SUFFIXES}
    text = pd.DataFrame(index=table.index)
    for column in table.columns:
        if column in bounds:
            continue
        cells = [_format_number(value, decimals) for value in table[column]]
        if column in bounded:
            cells = [cell if cell == MISSING or pd.isna(low) or pd.isna(high)
                     else f"{cell} [{_format_number(low, decimals)}, {_format_number(high, decimals)}]"
                     for cell, low, high in zip(cells, table[f"{column} lo"], table[f"{column} hi"], strict=True)]
        text[column] = cells
    return text


def interval_note(confidence_level: float, n_resamples: int) -> str:
    """What the brackets of a table with intervals mean."""
    return (f"Brackets: {confidence_level:.0%} percentile intervals from a prompt-level paired bootstrap "
            f"({n_resamples} resamples of the prompts, the same resamples for every method of a "
            f"generator); averages over generators have none.")


def format_ratio(value: float) -> str:
    """A ratio with two significant-ish digits: 12, 3.4, 0.56; NaN or inf as "--"."""
    if not np.isfinite(value):
        return MISSING
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}" if abs(value) >= 1 else f"{value:.2f}"


def render_markdown(table: pd.DataFrame, decimals: int = 1) -> str:
    """A GitHub-flavoured Markdown table (``DataFrame.to_markdown``), index first and
    left-aligned, the other columns right-aligned; numbers with ``decimals`` places, NaN as "--"."""
    cells = table.map(lambda value: _format_number(value, decimals))
    alignment = ("left", *["right"] * len(table.columns))
    # disable_numparse: the cells are already formatted; tabulate would reformat "50.0" as "50"
    return cells.to_markdown(colalign=alignment, disable_numparse=True) + "\n"


def render_latex(table: pd.DataFrame, decimals: int = 1) -> str:
    """A booktabs LaTeX tabular; α and δ in method labels become ``$\\alpha$`` and ``$\\delta$``
    so pdflatex copes."""
    latex = table.to_latex(
        float_format=lambda value: f"{value:.{decimals}f}", na_rep=MISSING, escape=True
    )
    return latex.replace("α", r"$\alpha$").replace("δ", r"$\delta$")


def write_table(table: pd.DataFrame, path_stem: str | Path, decimals: int = 1) -> list[Path]:
    """Write ``<path_stem>.csv`` (full precision, interval ends as their own columns), ``.md``
    and ``.tex`` (intervals as "value [lo, hi]"); returns the paths."""
    csv, markdown, latex = (Path(f"{path_stem}.{extension}") for extension in ("csv", "md", "tex"))
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv)
    shown = with_intervals(table, decimals) if _has_intervals(table) else table
    markdown.write_text(render_markdown(shown, decimals), encoding="utf-8")
    latex.write_text(render_latex(shown, decimals), encoding="utf-8")
    return [csv, markdown, latex]


def append_notes(markdown: str | Path, latex: str | Path, lines: Sequence[str]) -> None:
    """Append lines under a written table: verbatim to the Markdown, as % comments to the LaTeX."""
    with open(markdown, "a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    with open(latex, "a", encoding="utf-8") as out:
        out.write("".join(f"% {line.strip().strip('*')}\n" for line in lines if line.strip()))


def write_table1(inputs: pd.DataFrame, path_stem: str | Path, decimals: int = 1) -> list[Path]:
    """Table 1 from its inputs (``analysis.winrate.table1_inputs``, ``TABLE1_INPUT_COLUMNS``):
    write ``<stem>.csv/.md/.tex`` (``write_table``) and ``<stem>_inputs.csv`` (every row,
    with n, standard errors, judge and notes).  The CSV gets a ``status`` column per method (its
    rows' notes, e.g. "not evaluated: <reason>", else "evaluated by <judge>"); the Markdown ends
    with the judge and any notes, the LaTeX with the same as comments.  ``inputs`` may come back
    from a CSV: a "not evaluated" note shared by every row stands for ``attrs["status"]``."""
    table = table1_win_rates(inputs)
    paths = write_table(table, path_stem, decimals)
    table.assign(status=[_method_status(inputs[inputs["method_label"] == m]) for m in table.index]).to_csv(paths[0])
    details = Path(f"{path_stem}_inputs.csv")
    inputs.to_csv(details, index=False)
    judges = ", ".join(str(j) for j in inputs["judge"].dropna().unique()) or "none"
    notes = [f"- {row.generator} / {row.method_label}: {row.note}" for row in inputs.itertuples()
             if isinstance(row.note, str) and row.note and not row.note.startswith(REFERENCE_NOTE)]
    status = inputs.attrs.get("status") or _shared_not_evaluated(inputs)
    lines = [f"\nJudge: {judges}. WR and LC-WR in percent against {_reference_of(inputs)}."]
    lines += [f"\n**{status}**"] if status else ([""] + notes if notes else [])
    append_notes(paths[1], paths[2], lines)
    return [*paths, details]


def _by_generator(frame: pd.DataFrame, metrics: Mapping[str, str]) -> pd.DataFrame:
    """Rows per method, columns ``<generator> <short name>`` per metric, then the averages."""
    require_columns(frame, ["generator", "method_label", *metrics], "table input")
    bounded = [metric for metric in metrics if {f"{metric}_lo", f"{metric}_hi"} <= set(frame.columns)]
    values = [*metrics, *(f"{metric}_{end}" for metric in bounded for end in ("lo", "hi"))]
    methods = frame["method_label"].unique()  # every row's method gets its row, a bare mark's too
    frame = _without_extra_marks(frame, list(metrics))
    # pivot (not pivot_table) raises on a repeated generator × method instead of averaging it.
    wide = frame.pivot(index="method_label", columns="generator", values=values)
    generators = frame["generator"].unique()
    columns = {}
    for generator in generators:
        for metric, short in metrics.items():
            columns[f"{generator} {short}"] = wide[(metric, generator)]
            if metric in bounded:
                columns[f"{generator} {short} lo"] = wide[(f"{metric}_lo", generator)]
                columns[f"{generator} {short} hi"] = wide[(f"{metric}_hi", generator)]
    for metric, short in metrics.items():
        columns[f"Average {short}"] = wide[metric].mean(axis=1, skipna=False)
    table = pd.DataFrame(columns).reindex(methods)
    table.index.name = "Method"
    return table


def _without_extra_marks(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """`frame` without the bare marks that add nothing to the pivot: a mark is a row with no metric
    (a method setting that completed no response, ``unanswered_runs``, added so that it has a row);
    one that names no generator, or whose generator × method another row gives already (with values,
    or an earlier mark), is dropped. The method keeps its row ("--" where nothing else gives values),
    so a method that failed never makes the pivot repeat a generator × method and take the table
    down; a generator × method repeated with values on both rows still raises."""
    marks = frame[metrics].isna().all(axis=1)
    given = set(zip(frame.loc[~marks, "generator"], frame.loc[~marks, "method_label"]))
    key = list(zip(frame["generator"], frame["method_label"]))
    extra = marks & (frame["generator"].isna() | pd.Series([k in given for k in key], index=frame.index)
                     | frame.duplicated(["generator", "method_label"]))
    return frame[~extra]


def _has_intervals(table: pd.DataFrame) -> bool:
    return any(str(column).endswith(INTERVAL_SUFFIXES) for column in table.columns)


def _format_number(value, decimals: int) -> str:
    if isinstance(value, str):  # already formatted (``with_intervals``)
        return value
    return MISSING if pd.isna(value) else f"{value:.{decimals}f}"


def _method_status(rows: pd.DataFrame) -> str:
    """One Table 1 row's status: its notes, led by "evaluated by <judge>" when it was judged."""
    notes = [note for note in dict.fromkeys(rows["note"]) if isinstance(note, str) and note]
    judges = [str(judge) for judge in dict.fromkeys(rows["judge"].dropna())]
    if judges and not any(note.startswith((NOT_EVALUATED, REFERENCE_NOTE)) for note in notes):
        notes = [f"evaluated by {', '.join(judges)}", *notes]
    return "; ".join(notes) or NOT_EVALUATED


def _shared_not_evaluated(inputs: pd.DataFrame) -> str | None:
    notes = inputs["note"].unique()
    if len(notes) == 1 and isinstance(notes[0], str) and notes[0].startswith(NOT_EVALUATED):
        return notes[0]
    return None


def _reference_of(inputs: pd.DataFrame) -> str:
    labels = inputs["reference_label"].dropna().unique()
    return str(labels[0]) if len(labels) else "Bo-N_min"
