"""The study's prompt set as JSONL {prompt_id, prompt}: from a local .json/.jsonl/.txt file or a
Hugging Face dataset "NAME[:CONFIG]", keeping the rows of `select` (0-based) in that order.

A dataset row's index is its prompt_id (AlpacaFarm: the af_eval_idx); `instruction` + `input`
rows become one prompt exactly as `specrej generate` reads them (specrej.io.read_prompts).
"""

import json
import sys
import tempfile
from pathlib import Path

from specrej.io import read_prompts

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params = snakemake.params  # noqa: F821
source, select = params.source, params.select


def dataset_rows(spec: str, split: str | None, revision: str | None, select: list[int]) -> list[dict]:
    try:
        import datasets
    except ImportError:
        sys.exit(f"prompts.source {spec!r} is a Hugging Face dataset: install `datasets` (pip install datasets)")
    name, _, config_name = spec.partition(":")
    data = datasets.load_dataset(name, config_name or None, split=split, revision=revision)
    if isinstance(data, datasets.DatasetDict):
        if len(data) != 1:
            sys.exit(f"{spec} has splits {sorted(data)}: set prompts.split")
        data = next(iter(data.values()))
    bad = [i for i in select if i >= len(data)]
    if bad:
        sys.exit(f"prompts.select: indices {bad} are out of range ({spec} has {len(data)} rows)")
    return [{**data[i], "prompt_id": i} for i in select]


if source.endswith((".json", ".jsonl", ".txt")) or Path(source).exists():
    items = read_prompts(source)
    items = items if select is None else [items[i] for i in select]
else:
    with tempfile.TemporaryDirectory() as tmp:  # read_prompts owns the instruction + input rule
        rows = Path(tmp) / "rows.jsonl"
        rows.write_text("".join(json.dumps(row, default=str) + "\n" for row in
                                dataset_rows(source, params.split, params.revision, select)))
        items = read_prompts(rows)

with open(snakemake.output[0], "w", encoding="utf-8") as out:  # noqa: F821
    for item in items:
        out.write(json.dumps({"prompt_id": item.prompt_id, "prompt": item.prompt}, ensure_ascii=False) + "\n")
print(f"{len(items)} prompts from {source}", file=sys.stderr)
