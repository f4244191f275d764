"""benchmarks/engine_benchmark.py on tiny models: its engine rows' names and its prune comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def run_benchmark(model: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "benchmarks" / "engine_benchmark.py"), "--model", str(model),
            "--new-tokens", "2", "--repeats", "1", "--samplings", "T=1", *args]
    return subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600, check=False)


def engine_rows(stdout: str) -> list[str]:
    """The engine column of the table's rows (batch, peak, sampling, engine..., tok/s, HF tok/s, ratio, %peak)."""
    return [" ".join(line.split()[3:-4]) for line in stdout.splitlines() if line.split()[:1] == ["1"]]


def test_one_row_runs_to_the_end_and_gemma3_is_named_by_its_own_forward_pass(tiny_model_dir):
    """--batch-sizes 1 with the prune comparison on: halving one row leaves no survivor to
    re-prefill, so the comparison is skipped with a line saying why, and the run exits 0. Gemma 3's
    row is its own forward pass's (gemma3.Gemma3Forward), not `llama`."""
    done = run_benchmark(tiny_model_dir("gemma3_text"), "--batch-sizes", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert engine_rows(done.stdout) == ["specrej (gemma3)", "HF"]
    assert "prune: skipped (halving needs a batch of at least 2 rows" in done.stdout


@pytest.mark.parametrize(("model_type", "family"), [("qwen3", "llama"), ("gemma3_text", "gemma3"), ("gpt2", "hf")])
def test_an_engine_row_is_named_by_the_forward_pass_it_runs(tiny_model_dir, model_type, family):
    from engine_benchmark import forward_family

    from specrej.api import load_engine

    assert forward_family(load_engine(str(tiny_model_dir(model_type)), device="cpu")) == family
