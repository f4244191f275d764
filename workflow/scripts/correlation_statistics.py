"""A pair's prefix table (all chunks) and its statistics per (prompt, tau)."""

import sys

import pandas as pd

from analysis.correlation import PREFIX_COLUMNS, prompt_tau_statistics
from analysis.io import load_prefix_table

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
tables = [load_prefix_table(path) for path in snakemake.input]  # noqa: F821
prefixes = pd.concat([t for t in tables if not t.empty], ignore_index=True) if any(not t.empty for t in tables) \
    else pd.DataFrame(columns=list(PREFIX_COLUMNS))
prefixes = prefixes.astype({"prompt_id": "str"})
prefixes.to_parquet(snakemake.output.prefixes, index=False)  # noqa: F821
statistics = prompt_tau_statistics(prefixes, alphas=snakemake.params.alphas)  # noqa: F821
statistics.to_csv(snakemake.output.statistics, index=False)  # noqa: F821
print(f"{prefixes['prompt_id'].nunique()} prompts, {len(statistics)} (prompt, tau) groups", file=sys.stderr)
