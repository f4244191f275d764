"""Figure 3: relative compute vs improvement score, one panel per generator / reward pair
(analysis.figures.figure3_compute_vs_improvement on results/metrics/summary.csv)."""

import sys

import pandas as pd

from analysis.figures import figure3_compute_vs_improvement, save_figure

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
summary = pd.read_csv(snakemake.input[0])  # noqa: F821
figure = figure3_compute_vs_improvement(summary, panel_column="pair")
save_figure(figure, snakemake.output.png.removesuffix(".png"))  # noqa: F821
