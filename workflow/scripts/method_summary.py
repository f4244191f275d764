"""results/metrics/summary.csv: per pair and configuration, the improvement score (eq. 8),
relative compute, speedup and perplexity with prompt-level paired bootstrap intervals, and the
prompts whose improvement is undefined (analysis.metrics.method_summary on the prompts every
configuration of the pair answered); results/metrics/bon_equivalent.csv: where each SR
configuration lands on its pair's BoN curve, with intervals over the same resamples
(analysis.bon_curve.bon_equivalent_compute). Where eq. 7's compute is modelled and runs.csv costs
the records on each of the calibration's repeats too, every interval of what that compute gives is
widened to hold each repeat's (analysis.modelled_compute.widened_by_repeats).

Params: improvement_normalization ("bon_min_range", the paper's eq. 8, or "bon_range"),
bootstrap_resamples, confidence_level, bootstrap_seed (config `tables`)."""

import sys

import pandas as pd

from analysis.bon_curve import bon_equivalent_compute
from analysis.metrics import bootstrap_draws, method_summary
from analysis.modelled_compute import REPEAT_COLUMN, widened_by_repeats

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params = snakemake.params  # noqa: F821
normalization, n_resamples = params.improvement_normalization, params.bootstrap_resamples
confidence_level, seed = params.confidence_level, params.bootstrap_seed

runs = pd.read_csv(snakemake.input[0], dtype={"prompt_id": str})  # noqa: F821
by = ["pair_key", "pair", "generator", "reward"]


def summarised(runs):
    summary = method_summary(runs, by=by, normalization=normalization, n_resamples=n_resamples,
                             confidence_level=confidence_level, seed=seed)
    draws = bootstrap_draws(runs, by=by, normalization=normalization, n_resamples=n_resamples, seed=seed)
    return summary, bon_equivalent_compute(summary, by=by, draws=draws, confidence_level=confidence_level)


summary, located = summarised(runs)
# every record costed on each repeat (a pair whose calibration kept no repeats: none widened)
costed = [c for c in runs.columns if c.startswith(REPEAT_COLUMN.format("")) and runs[c].notna().all()]
repeats = [summarised(runs.assign(work_s=runs[column])) for column in costed]
keys = ["pair_key", "method_label"]
summary = widened_by_repeats(summary, [s for s, _ in repeats], keys)
located = widened_by_repeats(located, [l for _, l in repeats], keys)
summary.to_csv(snakemake.output.summary, index=False)  # noqa: F821
located.to_csv(snakemake.output.bon_equivalent, index=False)  # noqa: F821
for row in summary.drop_duplicates("pair").itertuples():
    if row.zero_spread_prompts:
        print(f"{row.pair}: improvement over {row.n_prompts_improvement} of {row.n_prompts} prompts; "
              f"zero Bo-N_min reward spread on {row.zero_spread_prompts}", file=sys.stderr)
