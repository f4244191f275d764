"""messages.study_overview, what a run says before its first job, from the jobs of Snakemake's own
DAG (the Snakefile's onstart hands it `workflow.dag`'s jobs): the default study's jobs counted by
hand, and its time estimate against the measured study (the default study from a fresh clone: 1,208 s
on a 2-core CPU, 2026-12-03)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(ROOT / "workflow"))
import messages
import plan

pytest.importorskip("jsonschema")
update_config = pytest.importorskip("snakemake.utils").update_config

# The DAG that `snakemake` builds before its first job (as DAGApi.printdag builds it), printed as
# JSON: every job's (rule, wildcards), and those that need to run.
BUILD_DAG = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

snakefile, *configfiles = sys.argv[1:]
with SnakemakeApi(OutputSettings()) as api:
    workflow_api = api.workflow(resource_settings=ResourceSettings(cores=2), snakefile=Path(snakefile),
                                config_settings=ConfigSettings(configfiles=[Path(f) for f in configfiles]))
    workflow_api.dag()
    workflow = workflow_api._workflow
    workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
    workflow._build_dag()
    jobs = lambda listed: [(job.rule.name, dict(job.wildcards_dict)) for job in listed]
    print("DAG " + json.dumps({"all": jobs(workflow.dag.jobs), "left": jobs(workflow.dag.needrun_jobs())}))
"""


def dag_jobs(*overlays: Path, cwd: Path) -> dict[str, list[tuple[str, dict]]]:
    """{"all": [(rule, wildcards)], "left": [...]} of Snakemake's DAG for the default config with
    `overlays`, run in `cwd`."""
    result = subprocess.run([sys.executable, "-c", BUILD_DAG, str(ROOT / "Snakefile"), *map(str, overlays)],
                            cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    line = next((line for line in result.stdout.splitlines() if line.startswith("DAG ")), None)
    assert line, result.stderr[-3000:]
    return {key: [tuple(job) for job in jobs] for key, jobs in json.loads(line[4:]).items()}


def merged_config(*overlays: Path) -> dict:
    """config/config.yaml with `overlays` merged over it as `--configfile` merges them, validated."""
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for overlay in overlays:
        update_config(config, yaml.safe_load(overlay.read_text()))
    plan.validate_config(config, SCHEMA, ROOT)
    return config


# The rates of the measured study, per prompt and decode step (Best-of-N: of 16 rows), as the
# built-in methods declare them (`Method.step_seconds`); set here where a declaration lacks one.
MEASURED_STEP_SECONDS = {"bon": 0.054, "sr": 0.112, "sr-random": 0.097, "st-bon": 0.043, "sr-adaptive": 0.112}


@pytest.fixture(autouse=True)
def away_from_the_checkout(tmp_path, monkeypatch):
    """The estimate reads an earlier run's calibration under results/ of the folder it runs in, or one
    kept in $SPECREJ_CACHE: never the checkout's or the user's (the suite does not depend on them)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def declared_rates():
    from specrej.methods import get_method

    added = []
    for name, seconds in MEASURED_STEP_SECONDS.items():
        method = get_method(name)
        if getattr(method, "step_seconds", None) is None:
            object.__setattr__(method, "step_seconds", seconds)  # a frozen dataclass
            added.append(method)
    yield
    for method in added:
        object.__delattr__(method, "step_seconds")


@pytest.fixture(scope="module")
def default_dag(tmp_path_factory) -> dict:
    return dag_jobs(cwd=tmp_path_factory.mktemp("default"))


def test_the_default_studys_overview(default_dag, declared_rates):
    config = merged_config()
    lines = messages.study_overview(config, plan.Plan(config, ROOT), default_dag["all"], default_dag["left"])
    # by hand, for the one pair (log-prob): 8 shards of Bo16 (Bo128 / 16; the correlation study reads
    # shards 0-1 of them), SR's 3 runs, 2 Random SR, 1 ST-BoN, 1 DeepConf, 1 Pandora: 16 generate; then
    # 4 + 8 merges, 1 model fetch, 3 builds of the compiled graphs (one per row range), 1 calibration,
    # 1 chunk, 1 prefix scoring, 1 correlation statistics and 13 single jobs (prepare_prompts, rule all,
    # runs_table, method_summary, decisions, win_rates, tables 1-2, figures 2-4, correlation_summary,
    # headline): 16 + 12 + 8 + 13 = 49
    lines = lines.splitlines()
    assert lines[0] == ("specrej: the study: 49 jobs (16 of them generating), 1 pair (SmolLM2-135M / logprob), "
                        "12 prompts, up to 64 new tokens per response")
    assert lines[1] == ("specrej:   Best-of-N 16, 32, 64, 128 (shards of 16); SR α=0.5, 0.7, 0.9; Random SR "
                        "α=0.5, 0.9; ST-BoN N=32; DeepConf N=32 η=0.9; Pandora N=64 c=0.002")
    assert lines[2] == ("specrej:   about 15 min from an empty results/ on a 2-core CPU (SmolLM2-135M's per-job times, "
                        "measured 2026-12-03); a GPU is faster")


def test_the_estimate_of_the_default_study_by_hand(default_dag, declared_rates):
    # by hand from the rates: 8 shards x (5.9 + 12 x 64 x 16 x 0.054 / 16) = 378.976 s, SR
    # 3 x (5.9 + 768 x 0.112) = 275.748, Random SR 2 x (5.9 + 768 x 0.097) = 160.792, ST-BoN
    # 5.9 + 768 x 0.043 = 38.924, DeepConf 5.9 + 768 x 0.110 = 90.38, Pandora 5.9 + 768 x 0.172 =
    # 137.996, the judge (12 runs against Bo16) 5.9 + 11 x 12 x 0.41 = 60.02, the fetch 31, the graphs'
    # builds 3 x 75, the calibration 2 x 96 (it holds both cores), the prefixes 3.3, 25 other jobs x 0.85 =
    # 21.25: 1615.386 s two at a time, + 49 x 2.3 s = 920.393 s. The rates are the 2026-12-03 study's
    # (1,208 s measured for its 45 jobs against 1,210 estimated: docs/results.md, "Time estimates of the
    # workflow")
    config = merged_config()
    estimate = messages.jobs_seconds(config, plan.Plan(config, ROOT), default_dag["all"])
    assert estimate == pytest.approx(920.393, abs=0.05)
    # on a machine whose calibration says its steps take twice as long: the generation jobs' steps
    # (their 1,082.816 s less their 16 x 5.9 s start: 988.416 s) twice, two at a time
    scaled = messages.jobs_seconds(config, plan.Plan(config, ROOT), default_dag["all"], scale=2.0)
    assert scaled == pytest.approx(920.393 + (1082.816 - 16 * 5.9) / 2, abs=0.05)


def calibration_of(cpu: str, forward_16: float, sample_16: float, day: str = "2026-12-07", kind: str = "measured") -> str:
    return json.dumps({"kind": kind, "cpu": cpu, "measured_at": f"{day}T00:00:00",
                       "forward": {"plain": {"rows": [1, 16], "seconds": [[0.03], [forward_16]]}},
                       "sample": {"plain": {"rows": [1, 16], "seconds": [0.002, sample_16]}}})


def test_this_machines_calibration_scales_the_estimate_by_its_step(tmp_path, declared_rates):
    from specrej.records.step_profile import cpu_name

    # a 16-row step of 90 ms forward + 18 ms sampling = 108 ms, against Best-of-N's measured 54: 2x
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "pair.json").write_text(calibration_of(cpu_name(), 0.09, 0.018))
    scale, words = messages.machine_scale(tmp_path, "bon")
    assert scale == pytest.approx(2.0)
    assert words == "this machine's calibration of 2026-12-07: a 16-row step 108 ms against the measured 54"
    assert messages.machine_scale(tmp_path / "none", "bon") is None
    # another CPU's calibration, or a roofline estimate, says nothing of this machine
    (tmp_path / "calibration" / "pair.json").write_text(calibration_of("Another CPU", 0.09, 0.018))
    (tmp_path / "calibration" / "roofline.json").write_text(calibration_of(cpu_name(), 0.009, 0.0018, kind="roofline"))
    assert messages.machine_scale(tmp_path, "bon") is None
    # without one in results/, the newest that `specrej calibrate` kept for this CPU in $SPECREJ_CACHE:
    # 27 ms + 0 ms = 27 ms, half the measured 54
    for key, day, forward in (("a", "2026-12-05", 0.09), ("b", "2026-12-06", 0.027)):
        (tmp_path / "cache" / "compiled" / key).mkdir(parents=True)
        kept = tmp_path / "cache" / "compiled" / key / "calibration-1-threads-compile-auto.json"
        kept.write_text(calibration_of(cpu_name(), forward, 0.0, day))
        os.utime(kept, (int(day[-2:]), int(day[-2:])))  # modified in the order measured
    scale, words = messages.machine_scale(tmp_path / "none", "bon")
    assert scale == pytest.approx(0.5) and words.startswith("this machine's calibration of 2026-12-06: a 16-row step 27 ms")


def test_a_method_without_a_declared_rate_is_timed_at_the_fallback(tmp_path, monkeypatch):
    (tmp_path / "rateless.py").write_text(
        "from specrej.methods import get_method\nimport dataclasses\n"
        "M = dataclasses.replace(get_method('sr-random'), name='rateless')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = merged_config()
    config["methods"] = config["methods"][:1] + [{"name": "python:rateless:M", "grid": {"alpha": [0.5]}}]
    jobs = plan.Plan(config, ROOT)
    from specrej.methods import get_method

    if getattr(get_method("python:rateless:M"), "step_seconds", None) is not None:
        object.__setattr__(get_method("python:rateless:M"), "step_seconds", None)
    # 5.9 s to start + 12 prompts x 64 steps x 0.112 s (SR's measured rate, the fallback)
    seconds = messages.job_seconds(config, jobs, "method_run", {"method": "rateless", "setting": "alpha0.5",
                                                                "chunk": next(iter(jobs.chunks))})
    assert seconds == pytest.approx(5.9 + 12 * 64 * 0.112)


def test_a_resumed_run_says_how_many_jobs_are_left_and_how_long_they_take(default_dag, declared_rates):
    config = merged_config()
    jobs = plan.Plan(config, ROOT)
    left = [job for job in default_dag["all"] if job[0] in ("headline", "all", "table2")]
    resumed = messages.study_overview(config, jobs, default_dag["all"], left).splitlines()
    # 3 jobs: 2 x 0.85 s two at a time + 3 x 2.3 s = 7.75 s
    assert resumed[3] == "specrej:   this run has 3 of them left, under a minute (finished jobs are kept)"
    assert len(messages.study_overview(config, jobs, default_dag["all"], default_dag["all"]).splitlines()) == 3


def test_another_model_is_named_in_the_estimate(tmp_path, declared_rates):
    overlay = ROOT / "config" / "grid.yaml"
    config = merged_config(overlay)
    dag = dag_jobs(overlay, cwd=tmp_path)
    estimate = messages.study_overview(config, plan.Plan(config, ROOT), dag["all"], dag["left"]).splitlines()[2]
    assert "from an empty results/grid/" in estimate and "larger models take longer" in estimate
