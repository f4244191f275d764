"""Table 2 (perplexity and speedup per method and generator, under the table2_reward, the
paper's log-prob reward; per pair where it names several rewards) as CSV (values and interval ends as numbers), Markdown and LaTeX
("value [lo, hi]": prompt-level paired bootstrap intervals from results/metrics/summary.csv),
with notes on the intervals and on excluded prompts; a method setting that completed no response
on any prompt is a row of "--" whose CSV `status` (and the note) says so."""

import sys

import pandas as pd

from analysis.tables import interval_note, table2_perplexity_speedup, write_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from table_notes import add_notes, failed_note, no_response_rows, zero_spread_note  # noqa: E402

params, out = snakemake.params, snakemake.output  # noqa: F821
summary = pd.read_csv(snakemake.input.summary, dtype={"zero_spread_prompts": str})  # noqa: F821
rows = summary[summary["pair"].isin(params.pairs)]
notes = []
if rows.empty:
    reason = f"not evaluated: no pair uses the reward {params.reward!r} (tables.table2_reward)"
    blank = ["perplexity", "speedup_vs_largest_bon", "perplexity_lo", "perplexity_hi",
             "speedup_vs_largest_bon_lo", "speedup_vs_largest_bon_hi", "flops_speedup_vs_largest_bon",
             "flops_speedup_vs_largest_bon_lo", "flops_speedup_vs_largest_bon_hi"]
    rows = summary.drop_duplicates("method_label").assign(generator=summary["generator"].iloc[0],
                                                          **dict.fromkeys(blank, float("nan")))
    notes.append(reason[0].upper() + reason[1:] + ".")
silent = no_response_rows(snakemake.input.failed, params.pairs)  # noqa: F821
if not rows.empty and not silent.empty:  # a setting without a response: a row that says so, not no row
    rows = pd.concat([rows, silent.drop(columns="status")], ignore_index=True)
per_pair = rows["reward"].nunique() > 1
if per_pair:  # several rewards of one generator: a column group per pair (a silent row's too: it names its pair)
    rows = rows.assign(generator=rows["pair"])
table = table2_perplexity_speedup(rows)
write_table(table, out.csv.removesuffix(".csv"))
if notes:
    table.assign(status=notes[0]).to_csv(out.csv)
elif not silent.empty:  # per pair, the pairs where it answered nothing (it may have answered under another)
    status = {label: group["status"].iloc[0] + (f" ({', '.join(group['pair'])})" if per_pair else "")
              for label, group in silent.groupby("method_label", sort=False)}
    table.assign(status=[status.get(label, "") for label in table.index]).to_csv(out.csv)
elif {"confidence_level", "bootstrap_resamples"} <= set(rows.columns):
    notes.append(interval_note(rows["confidence_level"].iloc[0], int(rows["bootstrap_resamples"].iloc[0])))
notes.append(failed_note(snakemake.input.failed, params.pairs))  # noqa: F821
if "zero_spread_prompts" in rows.columns:
    notes.append(zero_spread_note(rows))
add_notes(out.md, out.tex, [n for n in notes if n])
