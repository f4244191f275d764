"""results/adaptive/<pair>/survival.csv: the adaptive rule (fit on the held-out prompts) against
fixed α at equal tokens on the correlation study's responses (analysis.adaptive_study)."""

import sys

from analysis.adaptive_study import survival_at_equal_tokens
from analysis.io import load_prefix_table
from specrej.methods.adaptive_cut import fit_from_prefix_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params = snakemake.params  # noqa: F821
fits = fit_from_prefix_table(load_prefix_table(snakemake.input.calibration))  # noqa: F821
survival = survival_at_equal_tokens(load_prefix_table(snakemake.input.prefixes), fits, params.deltas,  # noqa: F821
                                    n_resamples=params.n_resamples, confidence_level=params.confidence_level,
                                    seed=params.seed)
survival.to_csv(snakemake.output[0], index=False)  # noqa: F821
