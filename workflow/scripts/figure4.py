"""Figure 4: distribution across prompts of Pearson r and Kendall tau_a per decision token
(analysis.figures.figure4_correlation_distributions) for one pair. Kendall is tau-a, the
paper's Appendix B definition (tau-b is in the statistics CSV as kendall_b)."""

import sys

import pandas as pd

from analysis.figures import figure4_correlation_distributions, save_figure

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
statistics = pd.read_csv(snakemake.input[0], dtype={"prompt_id": str})  # noqa: F821
figure = figure4_correlation_distributions(statistics)
figure.suptitle(snakemake.params.pair, fontsize="small")  # noqa: F821
save_figure(figure, snakemake.output.png.removesuffix(".png"))  # noqa: F821
