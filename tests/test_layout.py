"""The package's architecture, checked: no import cycles, no module over 400 lines (the package's,
the analysis', the workflow's and the benchmarks'), the method declarations and the record modules
importable without torch."""

import subprocess
import sys
from pathlib import Path

from specrej.methods import built_in

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from import_graph import cycles, imports, modules  # noqa: E402


# the folders whose Python modules the size check covers (workflow/ with its scripts)
SIZED = ("specrej", "analysis", "workflow", "benchmarks")


def test_no_import_cycles_and_no_module_over_400_lines():
    mods = modules(ROOT / "specrej")
    graph = {name: imports(name, path, set(mods)) - {name.rpartition(".")[0]} for name, path in mods.items()}
    assert cycles(graph) == []
    paths = [path for folder in SIZED for path in sorted((ROOT / folder).rglob("*.py"))]
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in paths}
    assert {name: size for name, size in sizes.items() if size > 400} == {}


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_declarations_and_records_import_without_torch():
    """Every built-in method's module too: the workflow reads the declarations each time it plans
    (every cluster job plans again), so a method imports torch only where its algorithm runs."""
    code = ("import sys; import specrej.methods, specrej.methods.cuts, specrej.methods.adaptive_cut, "
            "specrej.records.io, specrej.records.flops, specrej.records.result; "
            "print(','.join(specrej.methods.built_in()), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == [",".join(built_in()), "False"]


def test_a_built_in_method_imports_only_the_method_surface():
    """A method is written against specrej/methods/surface.py alone: every module of specrej/methods
    but the surface and its implementation (the session, and prompt_run, which runs a method in one)
    imports nothing of the project beyond specrej.methods and specrej.errors: no engine, record,
    reward or run module."""
    mods = modules(ROOT / "specrej")
    allowed = {name for name in mods if name == "specrej.methods" or name.startswith("specrej.methods.")}
    allowed |= {"specrej", "specrej.errors"}
    implementation = {"specrej.methods.session", "specrej.methods.surface", "specrej.methods.prompt_run"}
    reaches = {name: sorted(imports(name, path, set(mods)) - allowed) for name, path in mods.items()
               if name in allowed - implementation}
    assert {name for name in reaches} >= {"specrej.methods.sr", "specrej.methods.st_bon", "specrej.methods.deepconf"}
    assert {name: found for name, found in reaches.items() if found} == {}
