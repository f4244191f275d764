"""results/metrics/summary.csv: per pair and configuration, the improvement score (eq. 8),
relative compute, speedup and perplexity with prompt-level paired bootstrap intervals, and the
prompts whose improvement is undefined (analysis.metrics.method_summary on the prompts every
configuration of the pair answered); results/metrics/bon_equivalent.csv: where each SR
configuration lands on its pair's BoN curve, with intervals over the same resamples
(analysis.bon_curve.bon_equivalent_compute).

Params: improvement_normalization ("bon_min_range", the paper's eq. 8, or "bon_range"),
bootstrap_resamples, confidence_level, bootstrap_seed (config `tables`)."""

import sys

import pandas as pd

from analysis.bon_curve import bon_equivalent_compute
from analysis.metrics import bootstrap_draws, method_summary

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params = snakemake.params  # noqa: F821
normalization, n_resamples = params.improvement_normalization, params.bootstrap_resamples
confidence_level, seed = params.confidence_level, params.bootstrap_seed

runs = pd.read_csv(snakemake.input[0], dtype={"prompt_id": str})  # noqa: F821
by = ["pair_key", "pair", "generator", "reward"]
summary = method_summary(runs, by=by, normalization=normalization, n_resamples=n_resamples,
                         confidence_level=confidence_level, seed=seed)
summary.to_csv(snakemake.output.summary, index=False)  # noqa: F821
draws = bootstrap_draws(runs, by=by, normalization=normalization, n_resamples=n_resamples, seed=seed)
located = bon_equivalent_compute(summary, by=by, draws=draws, confidence_level=confidence_level)
located.to_csv(snakemake.output.bon_equivalent, index=False)  # noqa: F821
for row in summary.drop_duplicates("pair").itertuples():
    if row.zero_spread_prompts:
        print(f"{row.pair}: improvement over {row.n_prompts_improvement} of {row.n_prompts} prompts; "
              f"zero Bo-N_min reward spread on {row.zero_spread_prompts}", file=sys.stderr)
