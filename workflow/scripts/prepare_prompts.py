"""The study's prompt set as JSONL {prompt_id, prompt}: from a local .json/.jsonl/.txt file or a
Hugging Face dataset "NAME[:CONFIG]", keeping the rows of `select` (0-based) in that order.

A local file's problem with a reference answer keeps it: its line also holds `answer`, `extract`,
`check` and, where the file gives them, `entry` and `problem_set` (specrej.records.prompts reads
them back; the reasoning-gym source is such a file, written by rule problem_set). A dataset's
columns are not read as answers: the plan, which decides whether the accuracy study runs, does
not download the dataset.

A dataset row's index is its prompt_id (AlpacaFarm: the af_eval_idx); `instruction` + `input`
rows become one prompt exactly as `specrej generate` reads them (specrej.records.prompts.read_prompts).

NAME is a Hub dataset id or a local directory. The Hub's automatic parquet export (revision
refs/convert/parquet) and a local copy of it hold one folder per config and split,
CONFIG/SPLIT/0000.parquet, and no dataset card that names the configs, so `datasets` would see a
single "default" config there: for that layout the rows are read from CONFIG/SPLIT/*.parquet
directly. Other datasets load by config name.
"""

import json
import sys
import tempfile
from pathlib import Path

from specrej.records.prompts import ANSWER_FIELDS, PromptItem, read_prompts

PARQUET_EXPORT = "refs/convert/parquet"  # the Hub's parquet export branch: CONFIG/SPLIT/NNNN.parquet


def dataset_split(name: str, config_name: str | None, split: str | None, revision: str | None):
    """One split of dataset `name` (Hub id or local directory) as a `datasets.Dataset`."""
    try:
        import datasets
    except ImportError:
        sys.exit(f"prompts.source {name!r} is a Hugging Face dataset: install `datasets` "
                 "(pip install datasets, or the package's `workflow` extra)")
    local = Path(name).is_dir()
    if config_name and ((local and (Path(name) / config_name).is_dir()) or (not local and revision == PARQUET_EXPORT)):
        if split is None:
            splits = sorted(p.name for p in (Path(name) / config_name).iterdir() if p.is_dir()) if local else []
            if len(splits) != 1:
                sys.exit(f"{name}:{config_name}: set prompts.split" + (f" (one of {splits})" if splits else ""))
            split = splits[0]
        return datasets.load_dataset(name, data_files={split: f"{config_name}/{split}/*.parquet"}, split=split,
                                     revision=None if local else revision)
    data = datasets.load_dataset(name, config_name or None, split=split, revision=None if local else revision)
    if isinstance(data, datasets.DatasetDict):
        if len(data) != 1:
            sys.exit(f"{name}:{config_name or ''} has splits {sorted(data)}: set prompts.split")
        data = next(iter(data.values()))
    return data


def dataset_rows(spec: str, split: str | None, revision: str | None, select: list[int]) -> list[dict]:
    """The rows `select` of dataset "NAME[:CONFIG]", each with its row index as prompt_id."""
    name, _, config_name = spec.partition(":")
    data = dataset_split(name, config_name or None, split, revision)
    bad = [i for i in select if i >= len(data)]
    if bad:
        sys.exit(f"prompts.select: indices {bad} are out of range ({spec} has {len(data)} rows)")
    return [{**data[i], "prompt_id": i} for i in select]


def prompt_items(source: str, select: list[int] | None, split: str | None = None, revision: str | None = None):
    """The study's prompts (specrej.records.prompts.PromptItem) from a local file or a dataset spec."""
    if source.endswith((".json", ".jsonl", ".txt")) or Path(source).is_file():
        items = read_prompts(source)
        return items if select is None else [items[i] for i in select]
    if select is None:
        sys.exit(f"prompts.source {source!r} is a Hugging Face dataset: give prompts.select (the row indices)")
    with tempfile.TemporaryDirectory() as tmp:  # read_prompts owns the instruction + input rule
        rows = Path(tmp) / "rows.jsonl"
        rows.write_text("".join(json.dumps({k: v for k, v in row.items() if k not in ANSWER_FIELDS}, default=str)
                                + "\n" for row in dataset_rows(source, split, revision, select)))  # no answers (above)
        return read_prompts(rows)


def prompt_line(item: PromptItem) -> dict:
    """The prompts file's line of `item`: its id and text, and its reference answer if it has one."""
    line = {"prompt_id": item.prompt_id, "prompt": item.prompt}
    if item.key is not None:
        line.update(answer=item.key.answer, extract=item.key.extract, check=item.key.check)
        line.update({name: value for name in ("entry", "problem_set")
                     if (value := getattr(item.key, name, None)) is not None})
    return line


def main(smk) -> None:
    sys.stderr = open(smk.log[0], "w", buffering=1)
    params = smk.params
    source = smk.input[0] if smk.input else params.dataset  # a local file is the rule's input
    items = prompt_items(source, params.select, params.split, params.revision)
    with open(smk.output[0], "w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(prompt_line(item), ensure_ascii=False) + "\n")
    answered = sum(item.key is not None and item.key.answer is not None for item in items)
    print(f"{len(items)} prompts from {source}" + (f", {answered} with a reference answer" if answered else ""),
          file=sys.stderr)


if "snakemake" in globals():  # run by Snakemake's `script:` (tests import the functions)
    main(snakemake)  # noqa: F821 (snakemake is injected)
