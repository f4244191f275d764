"""results/correlation/summary.csv: per pair and tau, the mean of each statistic across prompts
with a bootstrap confidence interval (analysis.correlation.summarize_by_tau); Kendall as
tau-a (`kendall`, the paper's Appendix B) and tau-b (`kendall_b`)."""

import sys

import pandas as pd

from analysis.correlation import summarize_by_tau

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params = snakemake.params  # noqa: F821
parts = []
for key, path in zip(params.pairs, snakemake.input, strict=True):  # noqa: F821
    statistics = pd.read_csv(path)
    summary = summarize_by_tau(statistics, confidence_level=params.confidence_level, n_resamples=params.n_resamples)
    labels = params.pairs[key]
    parts.append(summary.assign(pair=labels["pair"], generator=labels["generator"], reward=labels["reward"]))
summary = pd.concat(parts, ignore_index=True)
labels = ["pair", "generator", "reward"]
summary = summary[[*labels, *[column for column in summary.columns if column not in labels]]]
summary.to_csv(snakemake.output[0], index=False)  # noqa: F821
