"""The accuracy study's numbers (analysis.accuracy): results/metrics/accuracy.csv, accuracy per pair,
configuration and selection rule with its compute and its place on the self-consistency curve
(`accuracy_summary`); results/metrics/accuracy_ladder.csv, SC@k / BoN@k / pass@k from the largest
Best-of-N's candidates (`vote_ladder`); results/tables/accuracy.{csv,md,tex}, one row per
configuration (analysis.accuracy_page.accuracy_table).

Inputs: runs (every method setting's merged run), reference (the Best-of-N shard or direct files;
params.reference groups them per pair and N, each Bo-N pooled with every candidate). Params: meta
(per pair its display label), run_pairs (the pair of each run), reference_n (Bo-N_min), ks, and
the bootstrap settings of config `tables`."""

import sys

import pandas as pd

from analysis.accuracy import accuracy_summary, candidate_frame, selections, vote_ladder
from analysis.accuracy_page import accuracy_table
from analysis.tables import append_notes, write_table
from specrej.records.answers import SELECT_RULES
from specrej.records.io import read_records

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
sys.path.insert(0, snakemake.scriptdir)  # noqa: F821
from pooled_runs import pooled_records  # noqa: E402

params, inputs, out = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
bootstrap = {"confidence_level": params.confidence_level, "n_resamples": params.bootstrap_resamples,
             "seed": params.bootstrap_seed}

frames, pools = [], []
for pair, ladder in params.reference.items():
    for n, rung in sorted(ladder.items()):
        frames.append(candidate_frame(pooled_records(rung["files"], rung["shards"]), params.meta[pair]))
    pools.append(frames[-1])  # the largest N: the ladder's pool
for path in inputs.runs:
    frames.append(candidate_frame(read_records(path), params.meta[params.run_pairs[path]]))

selected = selections(pd.concat(frames, ignore_index=True), SELECT_RULES)
summary = accuracy_summary(selected, by=["pair"], reference_n=params.reference_n, **bootstrap)
summary.to_csv(out.summary, index=False)
ladder = vote_ladder(pd.concat(pools, ignore_index=True), params.ks, SELECT_RULES, by=["pair"],
                     reference_n=params.reference_n, **bootstrap)
ladder.to_csv(out.ladder, index=False)

write_table(accuracy_table(summary), out.csv.removesuffix(".csv"))
first = summary.iloc[0]
note = (f"\nAccuracy in percent on {int(first['n_prompts'])} problems; compute relative to Bo{params.reference_n}. "
        f"Brackets: {first['confidence_level']:.0%} percentile intervals from a prompt-level bootstrap "
        f"({int(first['bootstrap_resamples'])} resamples).")
append_notes(out.md, out.tex, [note])
for row in summary[summary["rule"] == "reward"].itertuples():
    print(f"{row.pair}: {row.method_label} {row.accuracy:.1f}% (reward's pick)", file=sys.stderr)
