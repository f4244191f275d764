"""Figure 4: distribution across prompts of Pearson r and Kendall tau_a per decision token
(analysis.figures.figure4_correlation_distributions) for each pair of params.pairs (the
inputs' labels, in their order): one row of panels per pair, a one-pair figure titled by its
pair. Kendall is tau-a, the paper's Appendix B definition (tau-b is in the statistics CSV as
kendall_b)."""

import sys

import pandas as pd

from analysis.figures import figure4_correlation_distributions, save_figure

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
pairs = snakemake.params.pairs  # noqa: F821
statistics = pd.concat([pd.read_csv(path, dtype={"prompt_id": str}).assign(pair=pair)
                        for path, pair in zip(snakemake.input, pairs, strict=True)],  # noqa: F821
                       ignore_index=True)
figure = figure4_correlation_distributions(statistics, panel_column="pair")
if len(pairs) == 1:
    figure.suptitle(pairs[0], fontsize="small")
save_figure(figure, snakemake.output.png.removesuffix(".png"))  # noqa: F821
