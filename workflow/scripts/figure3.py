"""Figure 3: relative compute vs improvement score with bootstrap error bars on both axes, one
panel per generator / reward pair (analysis.figures.figure3_compute_vs_improvement on
results/metrics/summary.csv), its x axis the measured compute (CPU or device seconds of the work),
wall-clock seconds or FLOPs (figures.figure3.compute); a panel
names the prompts its improvement leaves out."""

import sys

import pandas as pd

from analysis.figures import figure3_compute_vs_improvement, save_figure

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
summary = pd.read_csv(snakemake.input[0], dtype={"zero_spread_prompts": str}, keep_default_na=False,  # noqa: F821
                      na_values=["", "NaN", "nan"])
figure = figure3_compute_vs_improvement(summary, panel_column="pair", compute=snakemake.params.compute)  # noqa: F821
save_figure(figure, snakemake.output.png.removesuffix(".png"))  # noqa: F821
