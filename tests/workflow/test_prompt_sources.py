"""Prompt sources of the workflow (workflow/scripts/prepare_prompts.py), offline.

config/paper.yaml reads the AlpacaFarm evaluation set from the Hub's parquet export of
tatsu-lab/alpaca_farm (revision refs/convert/parquet): one folder per config and split,
CONFIG/SPLIT/0000.parquet. These tests build a small dataset in that layout on disk (with other
configs beside it, as on the Hub) and check that the loader reads the right config and split,
keeps the `select` rows in their order with the row index as prompt_id, and joins `instruction`
and `input` as specrej.records.prompts.read_prompts does. Nothing touches the network: the Hub and datasets
are set offline and their caches point into the test's folder.
"""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "workflow" / "scripts" / "prepare_prompts.py"
CONFIG = "alpaca_farm_evaluation"
N_ROWS = 20


def eval_rows() -> list[dict]:
    """AlpacaFarm evaluation columns; every third row has an `input` paragraph."""
    return [{"instruction": f"Instruction number {i}.", "input": f"Input paragraph {i}." if i % 3 == 0 else "",
             "output": f"reference {i}", "generator": "text-davinci-003", "dataset": "selfinstruct",
             "datasplit": "eval"} for i in range(N_ROWS)]


def expected_prompt(i: int) -> str:
    return f"Instruction number {i}.\n\nInput paragraph {i}." if i % 3 == 0 else f"Instruction number {i}."


def write_parquet(root: Path, config: str, split: str, rows: list[dict]) -> None:
    folder = root / config / split
    folder.mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(str(folder / "0000.parquet"))


@pytest.fixture
def offline_env(tmp_path, monkeypatch) -> dict:
    """Environment of a subprocess that cannot reach the Hub and caches under tmp_path."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"),
           "HF_DATASETS_CACHE": str(tmp_path / "hf_home" / "datasets")}
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_home" / "datasets")
    return env


@pytest.fixture
def alpaca_farm_export(tmp_path) -> Path:
    """A local copy of the parquet export's layout: the evaluation config and three others whose
    rows differ, so reading the wrong config or split shows."""
    root = tmp_path / "alpaca_farm"
    write_parquet(root, CONFIG, "eval", eval_rows())
    other = [{"instruction": "not an evaluation prompt", "input": "", "output": "x"}] * 7
    write_parquet(root, "alpaca_instructions", "sft", other)
    write_parquet(root, "alpaca_instructions", "val", other[:3])
    write_parquet(root, "alpaca_human_preference", "preference",
                  [{"instruction": "preference row", "input": "", "output_1": "a", "output_2": "b", "preference": 1}])
    return root


def run_script(tmp_path: Path, env: dict, **params) -> subprocess.CompletedProcess:
    """prepare_prompts.py as Snakemake's `script:` runs it (a `snakemake` object in its globals)
    for a dataset `source` (params.dataset; the rule has no input then)."""
    out, log = tmp_path / "prompts.jsonl", tmp_path / "prepare_prompts.log"
    params = {"split": None, "revision": None, "dataset": params.pop("source"), **params}
    runner = (
        "import runpy, sys, types\n"
        "params = types.SimpleNamespace(**{k: v for k, v in %r.items()})\n"
        "smk = types.SimpleNamespace(input=[], params=params, output=[%r], log=[%r])\n"
        "runpy.run_path(%r, init_globals={'snakemake': smk}, run_name='__main__')\n"
    ) % (params, str(out), str(log), str(SCRIPT))
    result = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    result.log = log.read_text() if log.exists() else ""
    return result


def read_output(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]


def test_parquet_export_layout_keeps_the_selected_rows_in_order(tmp_path, offline_env, alpaca_farm_export):
    select = [12, 0, 7, 3, 19]
    result = run_script(tmp_path, offline_env, source=f"{alpaca_farm_export}:{CONFIG}", split="eval",
                        revision="refs/convert/parquet", select=select)
    assert result.returncode == 0, result.stderr + result.log
    rows = read_output(tmp_path)
    assert [row["prompt_id"] for row in rows] == select
    assert [row["prompt"] for row in rows] == [expected_prompt(i) for i in select]
    assert "5 prompts from" in result.log


def test_the_only_split_of_a_config_needs_no_name(tmp_path, offline_env, alpaca_farm_export):
    result = run_script(tmp_path, offline_env, source=f"{alpaca_farm_export}:{CONFIG}", select=[4, 6])
    assert result.returncode == 0, result.stderr + result.log
    assert read_output(tmp_path) == [{"prompt_id": 4, "prompt": expected_prompt(4)},
                                     {"prompt_id": 6, "prompt": expected_prompt(6)}]


@pytest.mark.parametrize("params, message", [
    ({"source": "{root}:" + CONFIG, "split": "eval", "select": [3, N_ROWS]},
     f"prompts.select: indices [{N_ROWS}] are out of range"),
    ({"source": "{root}:alpaca_instructions", "select": [0]}, "set prompts.split (one of ['sft', 'val'])"),
])
def test_bad_selection_stops_with_one_message(tmp_path, offline_env, alpaca_farm_export, params, message):
    params = {**params, "source": params["source"].format(root=alpaca_farm_export)}
    result = run_script(tmp_path, offline_env, **params)
    assert result.returncode != 0
    assert message in result.stderr + result.log
    assert not (tmp_path / "prompts.jsonl").exists() or not (tmp_path / "prompts.jsonl").read_text()


def test_hub_parquet_export_is_read_from_the_config_split_folder(monkeypatch, offline_env):
    """The Hub path (no network here): the call that config/paper.yaml's source makes."""
    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return datasets.Dataset.from_list(eval_rows())

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    script = runpy.run_path(str(SCRIPT))  # no `snakemake` global: only the functions
    items = script["prompt_items"](f"tatsu-lab/alpaca_farm:{CONFIG}", [9, 1], "eval", "refs/convert/parquet")
    assert calls == [("tatsu-lab/alpaca_farm", None, {"data_files": {"eval": f"{CONFIG}/eval/*.parquet"},
                                                      "split": "eval", "revision": "refs/convert/parquet"})]
    assert [(item.prompt_id, item.prompt) for item in items] == [(9, expected_prompt(9)), (1, expected_prompt(1))]
    # any other revision: the dataset's own configs, by name
    calls.clear()
    script["prompt_items"](f"someone/dataset:{CONFIG}", [0], "eval", "main")
    assert calls == [("someone/dataset", CONFIG, {"split": "eval", "revision": "main"})]


def test_the_workflow_rule_reads_the_local_export(tmp_path, offline_env, alpaca_farm_export):
    """`snakemake results/prompts/prompts.jsonl` with a dataset source like config/paper.yaml's."""
    pytest.importorskip("snakemake")
    config = tmp_path / "prompts.yaml"
    select = [18, 2, 9]
    config.write_text(f"prompts:\n  source: {alpaca_farm_export}:{CONFIG}\n  split: eval\n"
                      f"  revision: refs/convert/parquet\n  select: {select}\n  chunk_size: 2\n")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "results/prompts/prompts.jsonl", "--snakefile", str(ROOT / "Snakefile"),
         "--cores", "1", "--configfile", str(config)],
        cwd=tmp_path, env=offline_env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    rows = [json.loads(line) for line in (tmp_path / "results/prompts/prompts.jsonl").read_text().splitlines()]
    assert rows == [{"prompt_id": i, "prompt": expected_prompt(i)} for i in select]


def test_study_prompt_set_reads_as_a_prompts_file():
    from specrej.records.prompts import read_prompts

    items = read_prompts(ROOT / "examples" / "study_prompts.json")
    assert len(items) >= 28 and all(isinstance(item.prompt_id, str) and item.prompt.strip() for item in items)
    assert sum("\n\n" in item.prompt for item in items) >= 5  # some carry an input paragraph
