"""results/metrics/runs.csv (one row per run file and answered prompt) and
results/failed_prompts.csv (one row per run file and prompt without an answer: an error record,
or no complete response). Labels (pair, generator, reward) are the config's display names."""

import sys

import pandas as pd

from analysis.io import best_responses_frame, failed_prompts, load_trajectories

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
meta = snakemake.params.meta  # noqa: F821
runs, failed = [], []
for path in snakemake.input.runs:  # noqa: F821
    records = load_trajectories(path)
    runs.append(best_responses_frame(records).assign(run=path, **meta[path]))
for path in snakemake.input.runs:  # noqa: F821
    failures = failed_prompts(load_trajectories(path))
    failed.append(failures.assign(run=path, **meta[path]))
    for row in failures.itertuples():
        print(f"FAILED {path} prompt {row.prompt_id}: {row.error}", file=sys.stderr)

runs = pd.concat(runs, ignore_index=True)
runs.to_csv(snakemake.output.runs, index=False)  # noqa: F821
columns = ["pair", "generator", "reward", "run", "prompt_id", "method", "error"]
failed = pd.concat(failed, ignore_index=True) if failed else pd.DataFrame(columns=columns)
failed[columns].to_csv(snakemake.output.failed, index=False)  # noqa: F821
