"""results/correlation/correctness.csv: per studied pair and decision token, how well the partial
reward predicts that a candidate ends with the right answer (analysis.correctness.correctness_prediction:
AUROC and point-biserial r, within prompts and pooled, with bootstrap intervals), on the
correlation study's prefix table and the Best-of-N responses it scored (pooled as score_prefixes
pools them, so the candidate ids agree).

Inputs: prefixes (one per pair), trajectories (their responses' files). Params: pairs (per pair, in
the order of the prefixes: its label, shards and files), the bootstrap settings of config
`correlation` and the seed of config `tables`."""

import sys

import pandas as pd

from analysis.accuracy import candidate_frame
from analysis.correctness import correctness_prediction
from analysis.io import load_prefix_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from pooled_runs import pooled_records  # noqa: E402

params = snakemake.params  # noqa: F821
parts = []
for prefixes, pair in zip(snakemake.input.prefixes, params.pairs, strict=True):  # noqa: F821
    prefix_table = load_prefix_table(prefixes)
    if prefix_table.empty:  # every prompt of the pair failed (results/failed_prompts.csv says so)
        print(f"{pair['pair']}: an empty prefix table, nothing to predict", file=sys.stderr)
        continue
    candidates = candidate_frame(pooled_records(pair["files"], pair["shards"]))
    prediction = correctness_prediction(prefix_table, candidates,
                                        confidence_level=params.confidence_level,
                                        n_resamples=params.bootstrap_resamples, seed=params.bootstrap_seed)
    parts.append(prediction.assign(pair=pair["pair"]))
    for row in prediction.itertuples():
        print(f"{pair['pair']} tau={row.tau}: AUROC within prompts {row.auroc_within:.3f}", file=sys.stderr)
table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["pair", "tau"])
table[["pair", *(c for c in table.columns if c != "pair")]].to_csv(snakemake.output[0], index=False)  # noqa: F821
