"""`snakemake --lint` in CI: the workflow has no lint (every rule names its conda env,
workflow/envs/specrej.yaml, and no param restates a file path)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("snakemake")

ROOT = Path(__file__).resolve().parents[2]

def parse_lints(text: str) -> list[tuple[str, str]]:
    """[(rule name or snakefile path, lint title)] from `snakemake --lint`'s text output."""
    lints, item = [], None
    for line in text.splitlines():
        header = re.match(r"Lints for (?:rule (\S+) \(|snakefile (.+):$)", line)
        if header:
            item = header.group(1) or header.group(2)
            continue
        title = re.match(r"    \* (.+?):?$", line)
        if title and item is not None:
            lints.append((item, title.group(1)))
    return lints


def test_parse_lints():
    text = ("Lints for snakefile /w/common.smk:\n    * Path composition with '+' in line 70:\n      body\n\n"
            "Lints for rule a (line 4, /w/x.smk):\n    * Specify a conda environment or container for each rule.:\n"
            "      This way, ...\n    * Param source is a prefix of input or output file but hardcoded:\n")
    assert parse_lints(text) == [("/w/common.smk", "Path composition with '+' in line 70"),
                                 ("a", "Specify a conda environment or container for each rule."),
                                 ("a", "Param source is a prefix of input or output file but hardcoded")]


def test_snakemake_lint_is_clean(tmp_path):
    args = [sys.executable, "-m", "snakemake", "--snakefile", ROOT / "Snakefile", "--lint"]
    result = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert "Lints for" in output or "Congratulations" in output, output[-3000:]  # the lint ran
    assert parse_lints(output) == [], output[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in output
