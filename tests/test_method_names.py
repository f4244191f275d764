"""Method knowledge lives in specrej/methods/: no code outside it names a built-in method by a
string literal (docstrings aside). The one exception is the workflow's message for the retired
`bon:` / `sr:` config blocks, which translates them into the `methods:` entries that replace them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specrej.methods import built_in

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {("workflow/method_entries.py", "old_blocks_message")}  # the retired blocks' own names


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _literals(path: Path, names: set[str]):
    """(innermost function, literal, line) of each string constant in `path` that is a method name."""
    tree = ast.parse(path.read_text())
    docstrings = _docstrings(tree)

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Constant) and child.value in names and id(child) not in docstrings:
                yield function, child.value, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def test_no_built_in_method_is_named_by_a_literal_outside_specrej_methods():
    names = set(built_in())
    found = set()
    for folder in ("specrej", "analysis", "workflow"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("specrej/methods/"):
                continue
            for function, literal, line in _literals(path, names):
                if (relative, function) not in ALLOWED:
                    found.add(f"{relative}:{line} {function}: {literal!r}")
    quoted = re.compile(r"[\"'](" + "|".join(map(re.escape, sorted(names))) + r")[\"']")
    for path in sorted((ROOT / "workflow").rglob("*.smk")) + [ROOT / "Snakefile"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line.split("#")[0]):
                found.add(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == set()


def test_the_check_sees_a_literal(tmp_path):
    """The walk above finds a method name in code and skips it in a docstring."""
    module = tmp_path / "m.py"
    module.write_text('"""Runs "sr"."""\n\ndef f():\n    """the sr method"""\n    return "sr"\n')
    assert list(_literals(module, {"sr"})) == [("f", "sr", 5)]
