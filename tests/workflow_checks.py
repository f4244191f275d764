"""Checks shared by the workflow tests (local cores and SLURM)."""

from pathlib import Path


def assert_tables_and_figures(results: Path) -> None:
    """Every table in CSV/Markdown/LaTeX and every figure in PNG/PDF exists and is not empty."""
    for stem in ("table1", "table2"):
        for ext in ("csv", "md", "tex"):
            assert (results / "tables" / f"{stem}.{ext}").stat().st_size > 0
    for stem in ("figure2", "figure3", "figure4"):
        for ext in ("png", "pdf"):
            assert (results / "figures" / f"{stem}.{ext}").stat().st_size > 1000
