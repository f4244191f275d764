"""`make gpu-check` at tiny sizes on the CPU (benchmarks/gpu_check.py --tiny): every section runs
and writes its record, so the script the GPU machine runs cannot rot between loans."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def make_target(target: str, **variables) -> list[str]:
    """`make TARGET` with this interpreter's environment as the Makefile's venv (`setup` not remade:
    the tests run inside an installed environment)."""
    venv = Path(sys.executable).parent.parent
    return ["make", "--no-print-directory", "-o", "setup", target, f"VENV={venv}",
            *(f"{name}={value}" for name, value in variables.items())]


def test_make_gpu_check_tiny_writes_one_report_with_every_section(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(make_target("gpu-check", GPU_CHECK_ARGS=f"--tiny --out {out}"), cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    sections = report["sections"]
    assert list(sections) == ["fast_paths", "memory", "engine_vs_hf", "sr_vs_bon", "compiled_step"]
    assert report["device"] == "cpu" and report["size"] == "tiny"
    # the fast paths against HF, bfloat16: every architecture on the engine's own forward, within tolerance
    models = sections["fast_paths"]["models"]
    assert set(models) == {"llama", "qwen3", "gemma3_text"}
    assert all(m["forward_kind"] == "llama" and 0 < m["max_abs_logit_error"] <= m["tolerance"] for m in models.values())
    # the measured peaks within budget + margin, Best-of-N in several batches
    runs = sections["memory"]["runs"]
    assert runs["bon"]["params"]["batch_size"] < runs["bon"]["params"]["n"]
    assert all(0 < r["measured_peak_bytes"] <= r["bound_bytes"] for r in runs.values())
    assert [row["batch"] for row in sections["engine_vs_hf"]["rows"]] == [2, 4]
    assert all(row["engine_tok_s"] > 0 and row["hf_tok_s"] > 0 for row in sections["engine_vs_hf"]["rows"])
    assert sections["sr_vs_bon"]["sr_over_bon_wall"] > 0
    # no CUDA: the engine's compiled step (inductor's C++) beside its eager one; HF's CUDA graphs
    # skipped with their one-line reason; nothing failed
    compiled = sections["compiled_step"]
    assert compiled["engine_compiled_tok_s"] > 0 and compiled["engine_eager_tok_s"] > 0 and compiled["engine_compile_s"] > 0
    assert compiled["hf_static"] == "CUDA graphs need a CUDA device (this run: cpu)"
    assert {s["status"] for s in sections.values()} == {"ok"}
    markdown = (out / "report.md").read_text()
    assert "## compiled_step: ok" in markdown and "- HF static cache: CUDA graphs need a CUDA device" in markdown
    assert "gemma3_text: max |logit error|" in markdown


def test_a_failed_section_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    def broken(*args, **kwargs):
        raise RuntimeError("the allocator said no")

    ran = []
    monkeypatch.setattr(gpu_check, "check_fast_paths", lambda *a: {"ok": False, "models": {}})
    monkeypatch.setattr(gpu_check, "check_memory", broken)
    monkeypatch.setattr(gpu_check, "check_engine_vs_hf", lambda *a: ran.append("engine_vs_hf") or {
        "ok": True, "rows": [], "params": 0})
    monkeypatch.setattr(gpu_check, "check_sr_vs_bon", broken)
    monkeypatch.setattr(gpu_check, "check_compiled_step", broken)
    status = gpu_check.main(["--tiny", "--out", str(tmp_path)])
    sections = json.loads((tmp_path / "report.json").read_text())["sections"]
    assert status == 1 and ran == ["engine_vs_hf"]
    assert [s["status"] for s in sections.values()] == ["failed", "failed", "ok", "failed", "failed"]
    assert sections["memory"]["error"] == "RuntimeError: the allocator said no"
    assert "`RuntimeError: the allocator said no`" in (tmp_path / "report.md").read_text()


def test_sections_not_started_by_the_deadline_are_skipped_with_the_reason(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    assert gpu_check.main(["--tiny", "--out", str(tmp_path), "--deadline-s", "0"]) == 0
    sections = json.loads((tmp_path / "report.json").read_text())["sections"]
    assert all(s == {"status": "skipped", "reason": "not started: 0 s deadline passed"} for s in sections.values())
