"""plan.study_overview, what a run says before its first job: the study's jobs counted by hand
for the default config and against Snakemake's own dry-run plan for others, and the time
estimate against the measured study of 2026-12-01 (27 min 11 s, the settings of config/all-methods.yaml)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(ROOT / "workflow"))
import plan

pytest.importorskip("jsonschema")
update_config = pytest.importorskip("snakemake.utils").update_config


def merged_config(*overlays: Path) -> dict:
    """config/config.yaml with `overlays` merged over it as `--configfile` merges them, validated."""
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for overlay in overlays:
        update_config(config, yaml.safe_load(overlay.read_text()))
    plan.validate_config(config, SCHEMA, ROOT)
    return config


def test_the_default_studys_overview():
    config = merged_config()
    lines = plan.study_overview(config, plan.Plan(config, ROOT)).splitlines()
    # by hand: 8 shards of Bo16 (Bo128 / 16; the correlation study reads shards 0-1 of them) and 6
    # method runs (3 SR, 2 Random SR, 1 ST-BoN) generate; then 4 + 6 merges, 1 model fetch, 1 chunk,
    # 1 prefix scoring, 1 correlation statistics and 13 single jobs (prepare_prompts, rule all,
    # runs_table, method_summary, decisions, win_rates, tables 1-2, figures 2-4, correlation_summary,
    # headline): 14 + 10 + 4 + 13 = 41
    assert lines[0] == ("specrej: the study: 41 jobs (14 of them generating), 1 pair (SmolLM2-135M / logprob), "
                        "24 prompts, up to 64 new tokens per response")
    assert lines[1] == ("specrej:   Best-of-N 16, 32, 64, 128 (shards of 16); SR α=0.5, 0.7, 0.9; "
                        "Random SR α=0.5, 0.9; ST-BoN N=32")
    assert lines[2] == ("specrej:   about 24 min from an empty results/ on a 2-core CPU (SmolLM2-135M's per-job "
                        "times, measured 2026-12-01); a GPU is faster")
    assert len(lines) == 3


def test_the_estimate_is_the_measured_default_study():
    # by hand from the constants: 8 shards x (5.9 + 24 x 64 x 16 x 5.81e-3) = 1189.4 s, SR 3 x (5.9 +
    # 1536 x 0.139) = 658.3, Random SR 2 x (5.9 + 1536 x 0.138) = 435.7, ST-BoN 1 x (5.9 + 1536 x
    # 0.081) = 130.3, the judge 5.9 + 9 x 24 x 0.52 = 118.2, the fetch 31, the prefixes 4.2, 23 other
    # jobs x 0.94 = 21.6: 2588.9 s two at a time, + 41 x 3.3 s = 1429.8 s
    config = merged_config()
    assert plan.study_seconds(config, plan.Plan(config, ROOT)) == pytest.approx(1429.8, abs=1)


def test_the_estimate_of_the_2026_12_01_study_is_its_measured_time():
    # the same constants for every setting of that study (config/all-methods.yaml): 45 jobs, 1630.4 s
    # by the arithmetic above with 3 Random SR and 2 ST-BoN runs; measured on a fresh clone: 1631 s
    config = merged_config(ROOT / "config" / "all-methods.yaml")
    assert plan.study_seconds(config, plan.Plan(config, ROOT)) == pytest.approx(1630.4, abs=1)


def test_a_resumed_run_says_how_many_jobs_are_left():
    config = merged_config()
    jobs = plan.Plan(config, ROOT)
    resumed = plan.study_overview(config, jobs, jobs_left=3).splitlines()
    assert resumed[3] == "specrej:   this run has 3 of them left (finished jobs are kept), so it takes less"
    assert len(plan.study_overview(config, jobs, jobs_left=41).splitlines()) == 3


def test_another_model_is_named_in_the_estimate():
    config = merged_config(ROOT / "config" / "grid.yaml")
    estimate = plan.study_overview(config, plan.Plan(config, ROOT)).splitlines()[2]
    assert "from an empty results/grid/" in estimate and "larger models take longer" in estimate


def dry_run_counts(*configfiles: Path, cwd: Path) -> tuple[dict[str, int], str]:
    """Snakemake's 'Job stats' of a dry run ({rule: count}, 'total' left out), and its output."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "-n", "--cores", "2",
               "--quiet", "rules"] + (["--configfile", *map(str, configfiles)] if configfiles else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}  # the tiny config's toy reward
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    counts = {}
    for line in output[output.index("Job stats:"):].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts, output


@pytest.mark.parametrize("overlay", [None, "config/adaptive.yaml", "config/all-methods.yaml", "config/grid.yaml",
                                     "tests/workflow/config.yaml"])
def test_the_overview_counts_the_jobs_snakemake_plans(overlay, tmp_path):
    overlays = [ROOT / overlay] if overlay else []
    counts, output = dry_run_counts(*overlays, cwd=tmp_path)
    config = merged_config(*overlays)
    jobs = plan.Plan(config, ROOT)
    assert dict(Counter(job["rule"] for job in plan.study_jobs(config, jobs))) == counts
    assert f"the study: {sum(counts.values())} jobs" in plan.study_overview(config, jobs)
    assert "specrej: the study" not in output  # a dry run does not print it
