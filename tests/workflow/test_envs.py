"""The conda env the rules name (`snakemake --sdm conda`): each env file parses, every rule that
runs a script names one, and each env names the packages its rules' scripts import and the ones
the checkout it installs declares (pyproject.toml). Building the envs needs conda and a network;
this checks what can be checked without them."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "workflow" / "rules"
SCRIPTS = ROOT / "workflow" / "scripts"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# an import name -> the package that provides it, where the two differ (conda-forge or PyPI name)
PROVIDERS = {"matplotlib": {"matplotlib", "matplotlib-base"}, "seaborn": {"seaborn", "seaborn-base"},
             "torch": {"torch", "pytorch"}, "yaml": {"pyyaml"}}


def requirement_name(spec: str) -> str:
    """'pandas>=2.2' -> 'pandas'; 'matplotlib-base' stays; a conda 'python=3.11' -> 'python'."""
    return re.split(r"[\s<>=!~\[;]", spec.strip(), maxsplit=1)[0].lower()


def env_contents(path: Path) -> tuple[set[str], dict[Path, set[str]]]:
    """The package names an env file installs, and the local folders it installs with pip
    ({folder: its extras})."""
    env = yaml.safe_load(path.read_text())
    assert set(env) <= {"name", "channels", "dependencies"} and env["dependencies"], path
    names, local = set(), {}
    for item in env["dependencies"]:
        for spec in item["pip"] if isinstance(item, dict) else [item]:
            spec = spec.removeprefix("-e ").strip()
            if spec.startswith("."):  # a folder, relative to the env file (conda runs pip there)
                folder, _, extras = spec.partition("[")
                local[(path.parent / folder).resolve()] = set(filter(None, extras.rstrip("]").split(",")))
            else:
                names.add(requirement_name(spec))
    return names, local


def rule_envs() -> dict[str, tuple[Path, Path]]:
    """{rule: (its conda env file, its script)} of every rule in workflow/rules/."""
    rules = {}
    for smk in sorted(RULES.glob("*.smk")):
        for block in re.split(r"(?m)^rule ", smk.read_text())[1:]:
            name = block.split(":", 1)[0]
            env = re.search(r'(?m)^    conda:\n\s+"([^"]+)"', block)
            script = re.search(r'(?m)^    script:\n\s+"([^"]+)"', block)
            rules[name] = (env and (RULES / env.group(1)).resolve(), script and (RULES / script.group(1)).resolve())
    return rules


def third_party_imports(script: Path) -> set[str]:
    """Top-level module names a script imports, less the standard library and the scripts' own
    helper modules (engine_call, gpu_slot, ... beside it)."""
    helpers = {path.stem for path in SCRIPTS.glob("*.py")}
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - helpers - {"__future__"}


def test_every_rule_that_runs_a_script_names_an_env_that_parses():
    rules = rule_envs()
    assert "method_run" in rules and "headline" in rules  # the parse found the rules
    for rule, (env, script) in rules.items():
        assert script is not None and script.is_file(), rule
        assert env is not None and env.is_file(), f"rule {rule} names no conda env file"
        env_contents(env)


def test_each_env_names_the_packages_its_rules_scripts_import():
    checkout = ROOT.resolve()
    for rule, (env, script) in rule_envs().items():
        names, local = env_contents(env)
        for module in third_party_imports(script):
            if module in ("specrej", "analysis"):  # this checkout's packages
                assert checkout in local, f"{env.name} does not install this checkout ({rule} imports {module})"
            else:
                assert PROVIDERS.get(module, {module}) & names, f"{env.name} lacks {module} ({rule}'s script)"


def test_each_env_names_what_the_checkout_declares():
    """The checkout's own dependencies, `datasets` (a Hugging Face prompt source) and the `eval`
    extra (Table 1's judge, alpaca-eval) that the checkout is installed with."""
    wanted = {requirement_name(spec) for spec in PROJECT["dependencies"]} | {"datasets"}
    for env in {env for env, _ in rule_envs().values()}:
        names, local = env_contents(env)
        missing = {name for name in wanted if not PROVIDERS.get(name, {name}) & names}
        assert not missing, f"{env.name} lacks {sorted(missing)}"
        assert "eval" in local.get(ROOT.resolve(), set()), f"{env.name}: install this checkout with its eval extra"
