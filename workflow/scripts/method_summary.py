"""results/metrics/summary.csv: per pair and configuration, the improvement score, relative
compute, speedup and perplexity (analysis.metrics.method_summary on the prompts every
configuration of the pair answered), and results/metrics/bon_equivalent.csv."""

import sys

import pandas as pd

from analysis.metrics import bon_equivalent_compute, method_summary

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
runs = pd.read_csv(snakemake.input[0], dtype={"prompt_id": str})  # noqa: F821
by = ["pair_key", "pair", "generator", "reward"]
summary = method_summary(runs, by=by, reference_max=snakemake.params.reference_max)  # noqa: F821
summary.to_csv(snakemake.output.summary, index=False)  # noqa: F821
bon_equivalent_compute(summary, by=by).to_csv(snakemake.output.bon_equivalent, index=False)  # noqa: F821
