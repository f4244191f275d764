"""The documentation: the site builds strictly (no broken link or anchor), the generated CLI
page holds every command and option of the parser, every `specrej <command> --flag` that the
README and the pages mention exists, and the README stays a short front page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "cli_reference.py"
README = ROOT / "README.md"
README_MAX_LINES = 150


def load_hook():
    spec = importlib.util.spec_from_file_location("specrej_docs_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook():
    return load_hook()


@pytest.fixture(scope="module")
def parser():
    from specrej.cli.main import build_parser

    return build_parser()


def documents() -> dict[Path, str]:
    """The README and every page of the site."""
    paths = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    return {path: path.read_text(encoding="utf-8") for path in paths}


# -- the site builds --------------------------------------------------------------------------------

def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[docs]' "
                                           "(make setup installs the docs extra)")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in ("index.html", "cli/index.html", "api/index.html", "methods/index.html", "config/index.html",
                 "troubleshooting/index.html", "img/figure3-default.png"):
        assert (site / page).is_file(), page
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert "specrej-doctor" in cli and "--memory-budget" in cli  # the generated reference is in the page
    assert "chunk_size" in (site / "config" / "index.html").read_text(encoding="utf-8")  # config/README.md included
    assert not (site / "hooks").exists()


# -- the CLI reference is the parser ----------------------------------------------------------------

def sections(page: str) -> dict[str, str]:
    """The generated page split at its `### specrej ...` headings: {"" (the top level) or command: text}."""
    parts = re.split(r"^### specrej ?([\w-]*).*$", page, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_cli_page_holds_every_command_and_option(hook, parser):
    assert hook.CLI_MARKER in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    page = hook.cli_reference_markdown(parser)
    by_command = sections(page)
    options = hook.option_strings(parser)
    assert set(options) - {""} == set(hook.subcommands(parser)) and len(options) > 1
    for command, strings in options.items():
        assert command in by_command, f"no section for specrej {command}"
        text = by_command[command]
        for option in strings:
            assert f"`{option}`" in text, f"specrej {command} {option} is not in the generated CLI page"
    for command, (sub, _) in hook.subcommands(parser).items():
        for action in sub._actions:
            if action.help and len(action.help) > 20:  # help texts, not only the names
                assert " ".join(action.help.split())[:20] in by_command[command].replace("\\|", "|"), \
                    (command, action.dest)


def test_cli_page_follows_a_changed_parser(hook):
    import argparse

    parser = argparse.ArgumentParser(prog="specrej")
    commands = parser.add_subparsers(dest="command")
    sub = commands.add_parser("toy", help="a toy command")
    sub.add_argument("--brand-new-flag", type=int, default=3, help="appears at once")
    page = hook.cli_reference_markdown(parser)
    assert "### specrej toy" in page and "`--brand-new-flag`" in page and "appears at once" in page
    assert "`3`" in sections(page)["toy"]


def test_method_parameter_tables(hook):
    from specrej.methods import built_in

    page = hook.method_parameters_markdown()
    for name, method in built_in().items():
        assert f"### `{name}`" in page
        for param in method.params:
            assert f"| `{param.name}` |" in page, (name, param.name)
    departures = hook.st_bon_departures_markdown()
    assert departures.count("\n- ") >= 3
    methods_page = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    assert hook.METHODS_MARKER in methods_page and hook.ST_BON_MARKER in methods_page


# -- flags the README and the pages mention exist ---------------------------------------------------

def mentioned_flags(text: str, commands) -> list[tuple[str, str]]:
    """(command, --flag) for every `specrej COMMAND ... --flag` in `text`: a command runs to the end
    of its line (backslash continuations joined) or to a backtick, pipe, `;`, `&&`, `#` or `)`."""
    text = re.sub(r"\\\n\s*", " ", text)
    pattern = re.compile(r"\bspecrej\s+(" + "|".join(map(re.escape, commands)) + r")(?![\w-])([^\n`|;&#)]*)")
    found = []
    for match in pattern.finditer(text):
        found += [(match[1], flag) for flag in re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", match[2])]
    return found


def unknown_flags(text: str, options: dict[str, set[str]]) -> list[tuple[str, str]]:
    commands = [name for name in options if name]
    return [(command, flag) for command, flag in mentioned_flags(text, commands)
            if flag not in options[command] | options[""]]


def test_flag_checker_catches_a_made_up_flag(hook, parser):
    options = hook.option_strings(parser)
    text = ("run `specrej generate --method sr --no-such-flag 3` and\n"
            "specrej doctor --fetch \\\n    --also-made-up\n`specrej summary RUN --max-chars 80`")
    assert unknown_flags(text, options) == [("generate", "--no-such-flag"), ("doctor", "--also-made-up")]


def test_readme_and_docs_mention_only_flags_that_exist(hook, parser):
    options = hook.option_strings(parser)
    commands = [name for name in options if name]
    total, problems = 0, []
    for path, text in documents().items():
        total += len(mentioned_flags(text, commands))
        problems += [f"{path.relative_to(ROOT)}: specrej {command} {flag}"
                     for command, flag in unknown_flags(text, options)]
    assert not problems, "options the parser does not have:\n" + "\n".join(problems)
    assert total > 20  # the check did find the commands it checks


def test_cli_page_option_table_names_real_options(hook, parser):
    """The hand-written table of docs/cli.md names only options of `specrej generate`."""
    options = hook.option_strings(parser)
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    flags = set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", text))
    known = set().union(*options.values())
    assert flags and not flags - known, sorted(flags - known)


# -- the README -------------------------------------------------------------------------------------

def test_readme_is_short_and_starts_with_the_quick_start():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    first = re.search(r"^```[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert first, "README.md has no code block"
    assert "make study" in first[1] and "make test" in first[1]


def test_readme_keeps_the_section_specrej_doctor_points_to():
    from specrej.cli.doctor_env import GPU_README

    section = re.search(r'"([^"]+)"', GPU_README)[1]  # README "Installing on a GPU machine"
    headings = [line.lstrip("#").strip() for line in README.read_text(encoding="utf-8").splitlines()
                if line.startswith("## ")]
    assert any(heading.startswith(section) for heading in headings), (section, headings)


def test_readme_links_point_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [target for target in targets if "://" not in target]
    assert local
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, missing


# -- the interface a method is written against (specrej/methods/surface.py; docs/methods.md, "Adding a method") ---
# (protocol, how docs/methods.md names its members, the variable the built-in methods hold it in, what implements it)
METHOD_SURFACE = [("MethodSession", "session", "session", "specrej.methods.session:Session"),
                  ("Batch", "batch", "rollout", "specrej.methods.session:RolloutBatch")]


def protocol_members(protocol) -> set[str]:
    """A typing.Protocol's members: its attributes (annotations), properties and methods."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name, member in vars(protocol).items()
              if not name.startswith("_") and (callable(member) or isinstance(member, property))}
    return names


def init_attributes(cls) -> set[str]:
    """Every NAME of a `self.NAME = ...` in the class's __init__ (what an instance has beyond the class)."""
    import ast
    import inspect
    import textwrap

    init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    targets = [t for node in ast.walk(init) if isinstance(node, (ast.Assign, ast.AnnAssign))
               for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
    elements = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return {e.attr for e in elements if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
            and e.value.id == "self"}


def used_by_the_methods(variable: str) -> set[str]:
    """The attributes the built-in methods' code reads on `variable` (e.g. `rollout.length`): every
    module of specrej/methods but the package's and the surface's own (its protocol and implementation)."""
    import ast

    own = ("__init__.py", "surface.py", "session.py", "prompt_run.py")
    trees = [ast.parse(p.read_text()) for p in sorted((ROOT / "specrej" / "methods").glob("*.py")) if p.name not in own]
    return {node.attr for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == variable}


@pytest.mark.parametrize(("protocol_name", "prefix", "variable", "implementation"), METHOD_SURFACE)
def test_the_method_surface_is_one_protocol_documented_implemented_and_all_the_methods_use(
        protocol_name, prefix, variable, implementation):
    """Every member of the surface's protocol is a row of docs/methods.md's tables and is there on
    the class that implements it; the built-in methods use nothing on it beyond the protocol."""
    import importlib

    from specrej.methods import surface

    members = protocol_members(getattr(surface, protocol_name))
    page = (ROOT / "docs" / "methods.md").read_text()
    assert members
    undocumented = sorted(m for m in members if f"`{prefix}.{m}" not in page)
    assert not undocumented, f"docs/methods.md does not list {undocumented}"
    module, name = implementation.split(":")
    cls = getattr(importlib.import_module(module), name)
    missing = sorted(m for m in members if not hasattr(cls, m) and m not in init_attributes(cls))
    assert not missing, f"{name} does not implement {missing}"
    beyond = used_by_the_methods(variable) - members
    assert not beyond, f"the built-in methods use {sorted(beyond)} on {variable}, which {protocol_name} does not offer"


@pytest.mark.parametrize("record_class", ["Candidate", "Round"])
def test_every_field_of_the_records_a_method_writes_is_documented(record_class):
    """Each field of a candidate and a round is named in its class docstring and in a row of
    docs/methods.md's tables."""
    import dataclasses

    from specrej.methods import surface

    cls = getattr(surface, record_class)
    prefix = "candidate" if record_class == "Candidate" else "Round"
    page = (ROOT / "docs" / "methods.md").read_text()
    names = [f.name for f in dataclasses.fields(cls)] + [n for n, m in vars(cls).items()
                                                         if isinstance(m, property)]
    for field_name in names:
        assert f"`{field_name}`" in (cls.__doc__ or ""), f"{record_class}.{field_name}: name it in the docstring"
        assert f"`{prefix}.{field_name}" in page, f"docs/methods.md does not list `{prefix}.{field_name}`"
