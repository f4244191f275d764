"""Figure 2: partial vs final reward of one prompt's candidates at one tau
(analysis.figures.figure2_partial_vs_final). Unless the config names them, the prompt is the
one whose Pearson r at that tau is the median across prompts, and tau the middle decision token."""

import sys

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures import figure2_partial_vs_final, save_figure
from analysis.io import load_prefix_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params, out = snakemake.params, snakemake.output  # noqa: F821
prefixes = load_prefix_table(snakemake.input.prefixes)  # noqa: F821
statistics = pd.read_csv(snakemake.input.statistics, dtype={"prompt_id": str})  # noqa: F821

if prefixes.empty:
    figure = Figure(figsize=(5.5, 4.5))
    figure.text(0.5, 0.5, "no prefix scores: every prompt of the correlation study failed", ha="center")
else:
    taus = sorted(prefixes["tau"].unique())
    tau = params.tau if params.tau is not None else int(taus[(len(taus) - 1) // 2])
    if params.prompt is not None:
        prompt = str(params.prompt)
    else:
        at_tau = statistics[statistics["tau"] == tau].dropna(subset=["pearson"]).sort_values(["pearson", "prompt_id"])
        candidates = at_tau if not at_tau.empty else statistics[statistics["tau"] == tau]
        prompt = str(candidates["prompt_id"].iloc[(len(candidates) - 1) // 2])
    print(f"figure 2: {params.pair}, prompt {prompt}, tau {tau}", file=sys.stderr)
    figure = figure2_partial_vs_final(prefixes, prompt, int(tau))
    figure.suptitle(params.pair, fontsize="small")
save_figure(figure, out.png.removesuffix(".png"))
