"""`make setup`'s editable install of this project (pyproject.toml's packaging section)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_editable_install_prints_no_warning_and_adds_the_repository_root(tmp_path):
    """setuptools' editable wheel, built as pip builds it for `pip install -e .`, on a copy of the
    layout: the project's pyproject.toml with the packages and the folders beside them. It prints no
    "Editable installation ... folders in your working directory with the same name" block, and the
    wheel's .pth puts the project's folder on sys.path, so `import specrej, analysis` finds the checkout."""
    project = tmp_path / "project"
    for name in ("specrej", "analysis"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text("")
    for name in ("workflow", "benchmarks", "tests"):  # the folders the finder's warning is about
        (project / name).mkdir()
    shutil.copy(ROOT / "pyproject.toml", project)
    shutil.copy(ROOT / "README.md", project)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_editable({str(wheels)!r}))"],
        cwd=project, capture_output=True, text=True, timeout=120, check=False)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-3000:]
    assert "same name as your package" not in output and "Editable installation." not in output, output[-3000:]
    with zipfile.ZipFile(wheels / built.stdout.strip().splitlines()[-1]) as wheel:
        pth = [name for name in wheel.namelist() if name.endswith(".pth")]
        assert len(pth) == 1
        assert Path(wheel.read(pth[0]).decode().strip()) == project.resolve()
        top_level = next(name for name in wheel.namelist() if name.endswith("top_level.txt"))
        assert sorted(wheel.read(top_level).decode().split()) == ["analysis", "specrej"]
