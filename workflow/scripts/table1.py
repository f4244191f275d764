"""Table 1 (win-rate and length-controlled win-rate per method and generator) as CSV, Markdown
and LaTeX, written by analysis.tables.write_table1 (plus table1_inputs.csv: n, standard
errors, judge and notes per cell). Cells that were not evaluated read "--": the CSV's `status`
column and the note under the Markdown and LaTeX tables give the reason and the judge. The
prompts left out because they failed are named under the tables."""

import sys

import pandas as pd

from analysis.tables import write_table1

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from table_notes import add_notes, failed_note  # noqa: E402

out = snakemake.output  # noqa: F821
inputs = pd.read_csv(snakemake.input.win_rates)  # noqa: F821
write_table1(inputs, out.csv.removesuffix(".csv"))
failed = failed_note(snakemake.input.failed, snakemake.params.pairs)  # noqa: F821
add_notes(out.md, out.tex, [failed] if failed else [])
