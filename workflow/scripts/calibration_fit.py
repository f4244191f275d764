"""results/adaptive/<pair>/calibration_prefixes.parquet: the held-out prompts' prefix tables
pooled (what `specrej generate --method sr-adaptive --fit` reads); fits.csv: the fit it makes per
decision token (specrej.methods.adaptive_cut.fit_from_prefix_table, analysis.adaptive_study.fits_table)."""

import sys

import pandas as pd

from analysis.adaptive_study import fits_table
from analysis.io import load_prefix_table
from specrej.methods.adaptive_cut import fit_from_prefix_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
prefixes = pd.concat([load_prefix_table(path) for path in snakemake.input], ignore_index=True)  # noqa: F821
prefixes.to_parquet(snakemake.output.prefixes, index=False)  # noqa: F821
fits = fits_table(fit_from_prefix_table(prefixes))
fits.to_csv(snakemake.output.fits, index=False)  # noqa: F821
print(fits.to_string(index=False), file=sys.stderr)
