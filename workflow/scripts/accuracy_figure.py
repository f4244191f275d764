"""results/figures/accuracy_vs_compute.{png,pdf}: accuracy against compute relative to SC@Bo-N_min,
one panel per pair (analysis.accuracy_figure): the SC@k, BoN@k, weighted SC@k and pass@k ladders as
lines, every other configuration under the reward's pick (filled) and the majority vote (hollow).

Inputs: summary (results/metrics/accuracy.csv), ladder (results/metrics/accuracy_ladder.csv).
Params: compute (config figures.figure3.compute: flops reads FLOPs, work and wall the measured
compute, whose ratios analysis.accuracy takes from the records' work seconds), reference_n."""

import sys

import pandas as pd

from analysis.accuracy_figure import figure_accuracy_vs_compute
from analysis.figures import save_figure

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params, inputs, out = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
summary, ladder = pd.read_csv(inputs.summary), pd.read_csv(inputs.ladder)
figure = figure_accuracy_vs_compute(summary, ladder, compute="flops" if params.compute == "flops" else "work",
                                    point_rules=("reward", "vote"), reference_n=params.reference_n)
save_figure(figure, out.png.removesuffix(".png"))
print(f"{len(summary)} configuration rows, {len(ladder)} ladder rows", file=sys.stderr)
