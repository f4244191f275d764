"""The accuracy section of the study's summary (``results/summary.md``) and its table, for studies
whose prompts have reference answers: per configuration the accuracy under each selection rule,
its compute and FLOPs, and the reward's pick's speedup at equal accuracy on the self-consistency
curve (``analysis.accuracy.accuracy_summary`` output), then the ladder's ceiling."""

import numpy as np
import pandas as pd

from analysis.page import Block, Heading, Paragraph, text
from analysis.settings import reference_label
from analysis.summary_format import bullets, table, with_ci
from analysis.tables import format_ratio


ACCURACY_RULES = {"reward": "reward's pick", "vote": "majority vote", "weighted-vote": "weighted vote"}


def accuracy_table(summary: pd.DataFrame) -> pd.DataFrame:
    """``accuracy_summary`` (with a ``pair`` column) as one row per configuration (its
    method_label): the accuracy in percent under each rule of ``ACCURACY_RULES`` and the compute
    and FLOPs relative to Bo-N_min, each with "<column> lo" / "<column> hi" (the shape
    ``analysis.tables.write_table`` writes), and the reward's pick's speedup at equal accuracy on the
    self-consistency curve, in compute and in FLOPs (NaN where it lands outside the curve). With
    several pairs each column starts with the pair."""
    pairs = list(dict.fromkeys(summary["pair"]))
    parts = []
    for pair in pairs:
        rows = summary[summary["pair"] == pair]
        labels = list(dict.fromkeys(rows["method_label"]))
        reference = reference_label(int(rows.loc[rows["reference"].astype(bool), "n"].min()))  # Bo-N_min
        columns = {}
        for rule, name in ACCURACY_RULES.items():
            mine = rows[rows["rule"] == rule].set_index("method_label")
            if not mine.empty:
                for suffix in ("", "_lo", "_hi"):
                    columns[name + suffix.replace("_", " ")] = mine[f"accuracy{suffix}"]
        first = rows.drop_duplicates("method_label").set_index("method_label")
        for column, name in (("relative_compute", f"compute (× {reference})"), ("relative_flops", f"FLOPs (× {reference})")):
            if column in first.columns and np.isfinite(first[column].astype(float)).any():
                for suffix in ("", "_lo", "_hi"):
                    columns[name + suffix.replace("_", " ")] = first[f"{column}{suffix}"]
        own = rows[rows["rule"] == "reward"].set_index("method_label")  # each method's own pick on the SC curve
        for column, name in (("sc_speedup", "speedup at equal accuracy (compute)"),
                             ("sc_flops_speedup", "speedup at equal accuracy (FLOPs)")):
            if column in own.columns and np.isfinite(own[column].astype(float)).any():
                for suffix in ("", "_lo", "_hi"):
                    columns[name + suffix.replace("_", " ")] = own[f"{column}{suffix}"]
        part = pd.DataFrame(columns).reindex(labels)
        parts.append(part.add_prefix(f"{pair} ") if len(pairs) > 1 else part)
    table = pd.concat(parts, axis=1) if len(parts) > 1 else parts[0]
    table.index.name = "Method"
    return table


def accuracy_section(summary: pd.DataFrame, ladder: pd.DataFrame | None = None) -> list[Block]:
    """The summary's accuracy section: per pair the table of ``accuracy_table`` (intervals in
    brackets), then the ladder's largest k: pass@k, the ceiling of every rule, beside SC@k and
    BoN@k."""
    intro = ("Share of the problems whose selected response gives the reference answer, per configuration "
             "and selection rule: the reward's pick is each method's own choice; the votes are computed from "
             "the same completed candidates (DeepConf's vote is its own: confidence-weighted, over the traces "
             "its filter keeps). No method selects on this axis. Best-of-N's majority vote is self-consistency, "
             "SC@N, on the same samples: compute relative to Bo-N_min is relative to SC at that N. The speedup "
             "at equal accuracy places the reward's pick on the SC@k curve (interpolated in log compute), as "
             "Table 2's speedup places a score on the Best-of-N curve: SC's compute at that accuracy over "
             "the method's; '--' where it lands outside the curve.")
    blocks: list[Block] = [Heading(2, text("Accuracy on the reference answers")), Paragraph(text(intro))]
    for pair, rows in summary.groupby("pair", sort=False):
        numbers = accuracy_table(rows)
        cells = []
        for label, row in numbers.iterrows():
            cell = {"Setting": str(label)}
            for column in numbers.columns:
                if not column.endswith((" lo", " hi")):
                    values = pd.Series({"v": row[column], "v_lo": row[f"{column} lo"], "v_hi": row[f"{column} hi"]})
                    ratio = column.startswith(("compute", "FLOPs", "speedup"))
                    formatter = format_ratio if ratio else (lambda v: f"{v:.1f}")
                    cell[column if ratio else f"{column} (%)"] = with_ci(values, "v", formatter)
            cells.append(cell)
        blocks += [Heading(3, text(str(pair))), table("Setting", cells)]
        mine = pd.DataFrame() if ladder is None or ladder.empty else ladder[ladder["pair"] == pair]
        if not mine.empty:
            top = mine[mine["k"] == mine["k"].max()]
            sentence = "; ".join(f"{row['ladder_label']} {with_ci(row, 'accuracy', lambda v: f'{v:.1f}%')}"
                                 for _, row in top.iterrows())
            first = top.iloc[0]
            blocks.append(Paragraph(text(
                f"From the largest Best-of-N's candidates ({int(first['n_prompts'])} problems): pass@{int(first['k'])} "
                f"(any of the first {int(first['k'])} right, every rule's ceiling) "
                f"{with_ci(first, 'pass_at_k', lambda v: f'{v:.1f}%')}; {sentence}.")))
    first = summary.iloc[0]
    if {"confidence_level", "bootstrap_resamples"} <= set(summary.columns):
        note = (f"Brackets: {first['confidence_level']:.0%} percentile intervals from a prompt-level bootstrap "
                f"({int(first['bootstrap_resamples'])} resamples of the problems, the same for every configuration "
                f"and rule of a pair); {int(first['n_prompts'])} problems answered by every configuration.")
        blocks.append(bullets([note]))
    return blocks
