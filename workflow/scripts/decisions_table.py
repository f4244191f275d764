"""results/tables/decisions.{csv,md}: per pair, method setting and quantity (rounds, first
decision token, each measure a method recorded of each of its decisions: "NAME (round K)" after
the first) the median, range and mean over
prompts (analysis.decisions). Params: pair_of (each run file's pair label)."""

import sys

import pandas as pd

from analysis.decisions import decision_rows, decision_table
from analysis.io import load_trajectories

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
pair_of, out = snakemake.params.pair_of, snakemake.output  # noqa: F821
rows = pd.concat([decision_rows(load_trajectories(path)).assign(pair=pair_of[path])
                  for path in snakemake.input.runs], ignore_index=True)  # noqa: F821
table = decision_table(rows, by=("pair", "method_label")).reset_index()
table.to_csv(out.csv, index=False)
with open(out.md, "w", encoding="utf-8") as markdown:
    markdown.write(table.rename(columns={"method_label": "setting"}).to_markdown(index=False, floatfmt=".3g") + "\n")
