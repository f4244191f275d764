"""The commands README.md and docs/*.md tell a user to type, run as they are written.

Commands are found by pattern (`DOCUMENTED`) in the docs' fenced code blocks (continuation lines
joined, comments dropped, `a && b` split) and, for `python benchmarks/...`, in inline code too; so
a command added to the docs is run here without editing this file, unless its program is new,
in which case `test_every_documented_program_has_its_size_arguments` names it.
Each runs as written plus `SIZE_ARGS` appended (argparse keeps an option's last value): a tiny
random model built in code instead of the real one, a few tokens, one round. The commands of one
page run in order in one folder (`specrej summary runs/sr.jsonl` reads what the `generate` before it
wrote); `benchmarks` and `examples` are linked into it, so paths read as they do in the repository.
A program that reads a finished study (`READS_A_STUDY`) runs on a tiny one the test writes into that
folder, never on the checkout's own results/: the suite does not depend on what the working tree holds.
Programs that load the real default model whatever they are given are marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
# the commands a user types that this test runs (the workflow's `make study` and snakemake runs are
# tested by tests/workflow; installs are not run; `make gpu-check` by tests/test_gpu_check.py)
DOCUMENTED = re.compile(r"(?:\.venv/bin/)?(?:specrej (?:generate|summary|doctor|score-prefixes)\b|"
                        r"python benchmarks/[\w/]+\.py|make benchmark\b)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE_BENCHMARK = re.compile(r"`(python benchmarks/[^`]+)`")
PROMPTS = [{"prompt": "Write a poem about the sea."}]
# appended to each program's documented arguments; {generator}/{reward} are the tiny models
SIZE_ARGS = {
    "make benchmark": ['BENCH_ARGS=--model {generator} --batch-sizes 2 --new-tokens 2 --repeats 1 --no-prune'],
    "python benchmarks/engine_benchmark.py": ["--model", "{generator}", "--batch-sizes", "2", "--new-tokens", "2",
                                              "--repeats", "1", "--no-prune"],
    "python benchmarks/memory_benchmark.py": ["--model", "{generator}", "--n", "8", "--batch-size", "4",
                                              "--b-init", "16", "--max-new-tokens", "4"],
    "specrej generate": ["--model", "{generator}", "--max-new-tokens", "4"],
    "specrej summary": [],
    "specrej score-prefixes": ["--model", "{generator}", "--decision-tokens", "2,4"],
    # the real default model, whatever the arguments: slow (doctor's smoke run loads it when it is cached)
    "python benchmarks/bf16_logprob_tolerance.py": ["--count", "1", "--n", "2", "--max-new-tokens", "4"],
    "python benchmarks/init_batch_rule.py": ["--count", "1", "--max-new-tokens", "16", "--memory-budget", "16MiB"],
    "python benchmarks/st_bon_agreement.py": ["--model", "{generator}"],
    "python benchmarks/profile_decode_step.py": ["--model", "{generator}", "--batch-sizes", "2", "--new-tokens", "2"],
    # its own random model (one layer here), one job alone and one beside a busy process
    "python benchmarks/compute_repeatability.py": ["--threads", "1", "--methods", "bon", "--repeats", "1",
                                                   "--layers", "1", "--new-tokens", "4"],
    "python benchmarks/pairing_bias.py": ["--model", "{generator}", "--prompts", "1", "--max-new-tokens", "4"],
    "specrej doctor": [],
}
SLOW = {"python benchmarks/bf16_logprob_tolerance.py", "python benchmarks/init_batch_rule.py", "specrej doctor"}
# programs whose first argument is a finished study's folder (RESULTS_DIR) -> its pair's default
# (--pair): the test writes a tiny study there first (`write_tiny_study`)
READS_A_STUDY = {"python benchmarks/st_bon_agreement.py": "smollm2--logprob"}
# the engine benchmark's peers (--peers ct2-..., llamacpp-...): the module each needs, and why it may be missing
PEER_PACKAGES = {
    "ct2-": ("ctranslate2", "CTranslate2 is not installed (pip install -e '.[bench]')"),
    # no wheel on PyPI: installing it builds llama.cpp (6.4 min on 2 cores), which the suite does not
    "llamacpp-": ("llama_cpp", "llama-cpp-python is not installed (docs/results.md: its sdist builds llama.cpp)"),
}
METHOD_SIZE_ARGS = {"bon": ["--n", "4", "--batch-size", "4"], "sr": ["--max-init-batch", "16"]}


def joined_lines(block: str) -> list[str]:
    """A code block's commands: continuation lines joined, comments dropped, `a && b` split."""
    commands = []
    for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
        line = re.split(r"\s+#", line, maxsplit=1)[0].strip()
        commands += [part.strip() for part in line.split("&&")]
    return commands


def documented_commands() -> dict[str, list[str]]:
    """{page: its runnable commands, in order of appearance}."""
    found = {}
    for page in PAGES:
        text = page.read_text()
        commands = [c for block in FENCE.findall(text) for c in joined_lines(block) if DOCUMENTED.match(c)]
        commands += [c for c in INLINE_BENCHMARK.findall(text) if c not in commands]
        if commands:
            found[str(page.relative_to(ROOT))] = commands
    return found


def program(command: str) -> str:
    """The program part of a command: `specrej generate`, `python benchmarks/x.py`, `make benchmark`."""
    return DOCUMENTED.match(command).group(0).removeprefix(".venv/bin/")


def size_args(command: str, models: dict) -> list[str]:
    name = program(command)
    extra = [arg.format(**models) for arg in SIZE_ARGS[name]]
    if name == "specrej generate":
        words = shlex.split(command)
        method = words[words.index("--method") + 1]
        extra += METHOD_SIZE_ARGS[method]
        if "--reward" in words and words[words.index("--reward") + 1] != "logprob":
            extra += ["--reward", models["reward"]]
    return extra


def runnable(command: str, models: dict) -> list[str]:
    """The argv that runs `command` here: this environment's python and specrej, make with the
    venv this test runs in (its `setup` not remade), the size arguments appended."""
    words = shlex.split(command)
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] in ("specrej", ".venv/bin/specrej"):
        words[0] = str(BIN / "specrej")
    elif words[0] == "make":
        words = ["make", "--no-print-directory", "-o", "setup", f"VENV={BIN.parent}", *words[1:]]
    return words + size_args(command, models)


@pytest.fixture(scope="module")
def models(generator_dir, reward_model_dir) -> dict:
    return {"generator": str(generator_dir), "reward": str(reward_model_dir)}


def run_in(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)


def page_folder(tmp_path: Path) -> Path:
    """A folder laid out as the repository root for the documented commands, with a prompts file."""
    for name in ("benchmarks", "examples", "Makefile", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "prompts.json").write_text(json.dumps(PROMPTS))
    return tmp_path


def write_tiny_study(command: str, folder: Path, models: dict) -> None:
    """The part of a finished study that `command` reads, written under `folder` by the tiny generator:
    its pair's Best-of-N shards as the workflow's `reference_shard` rule lays them out
    (<RESULTS_DIR>/runs/<pair>/bon/shard<k>/chunk0.jsonl, shard k with seed k), two of 4 responses."""
    words = shlex.split(command)
    results = folder / words[len(shlex.split(program(command)))]
    pair = words[words.index("--pair") + 1] if "--pair" in words else READS_A_STUDY[program(command)]
    for shard in range(2):
        out = results / "runs" / pair / "bon" / f"shard{shard}" / "chunk0.jsonl"
        done = run_in(folder, [str(BIN / "specrej"), "generate", "--method", "bon", "--n", "4", "--batch-size", "4",
                               "--model", models["generator"], "--reward", "logprob", "--max-new-tokens", "4",
                               "--seed", str(shard), "--prompts", "prompts.json", "--out", str(out), "--no-progress"])
        assert done.returncode == 0, f"the tiny study for `{command}`: {done.stderr[-3000:]}"


def test_the_pattern_finds_the_documented_commands():
    """A guard on the pattern itself: commands known to be in the docs are found, as written."""
    found = documented_commands()
    assert "make benchmark" in found["docs/results.md"]
    assert "specrej summary runs/sr.jsonl" in found["docs/cli.md"]
    assert ("specrej score-prefixes --trajectories runs/full.jsonl --reward logprob --decision-tokens "
            "8,16,32,64,128 --out runs/prefixes.parquet") in found["docs/correlation.md"]
    assert ".venv/bin/specrej doctor" in found["README.md"]
    assert "python benchmarks/memory_benchmark.py" in found["docs/results.md"]


def test_every_documented_program_has_its_size_arguments():
    programs = {program(c) for commands in documented_commands().values() for c in commands}
    assert not programs - set(SIZE_ARGS), f"add size arguments for {sorted(programs - set(SIZE_ARGS))} to SIZE_ARGS"


def test_no_test_reads_the_checkouts_own_results():
    """The suite takes as long, and passes alike, on a checkout holding a finished study
    (`make study`, then `make test`) as on a fresh clone: no test names the working tree's
    results folder (a documented command that reads a study gets a tiny one: `READS_A_STUDY`)."""
    working_tree_results = re.compile(r"""ROOT\s*/\s*["']results\b|ROOT\s*/\s*["']\S*results/runs""")
    tests = sorted(Path(__file__).parent.rglob("*.py"))
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in tests
                 for number, line in enumerate(path.read_text().splitlines(), 1) if working_tree_results.search(line)]
    assert not offenders, f"these lines read the checkout's own results/: {offenders}"
    # and every program that reads a study is one the docs run, so its tiny study is made
    assert set(READS_A_STUDY) <= {program(c) for commands in FAST_PAGES.values() for c in commands}


def first_appearances() -> dict[str, list[str]]:
    """{page: its fast commands that no earlier page has} (getting-started.md repeats cli.md's
    block: run once, and a page's later commands still find what its earlier ones wrote)."""
    pages, seen = {}, set()
    for page, commands in documented_commands().items():
        new = [c for c in commands if program(c) not in SLOW and c not in seen]
        seen.update(new)
        if new:
            pages[page] = new
    return pages


FAST_PAGES = first_appearances()
SLOW_COMMANDS = list({c: (page, c) for page, commands in reversed(documented_commands().items()) for c in commands
                      if program(c) in SLOW}.values())[::-1]  # each once, where it first appears


@pytest.mark.parametrize("page", list(FAST_PAGES))
def test_the_commands_of_a_page_run_as_written(page, models, tmp_path):
    folder = page_folder(tmp_path)
    not_installed = {}  # a peer's package missing: that command is left out, the others still run
    for command in FAST_PAGES[page]:
        missing = [why for peer, (module, why) in PEER_PACKAGES.items()
                   if peer in command and importlib.util.find_spec(module) is None]
        if missing:
            not_installed[command] = missing[0]
            continue
        if program(command) in READS_A_STUDY:
            write_tiny_study(command, folder, models)
        done = run_in(folder, runnable(command, models))
        assert done.returncode == 0, f"{page}: `{command}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if not_installed:
        pytest.skip(f"ran all but {list(not_installed)}: " + "; ".join(sorted(set(not_installed.values()))))


@pytest.mark.slow
@pytest.mark.parametrize(("page", "command"), SLOW_COMMANDS)
def test_the_commands_on_the_real_model_run_as_written(page, command, models, tmp_path):
    folder = page_folder(tmp_path)
    done = run_in(folder, runnable(command, models))
    assert done.returncode == 0, f"{page}: `{command}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
