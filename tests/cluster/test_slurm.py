"""profiles/slurm on a real SLURM: a one-node cluster on loopback (slurm_up.sh, installed with
apt-get when missing) runs the workflow's tiny configuration through `snakemake --profile
profiles/slurm`, and a failing job is reported as failed instead of being waited for.

The profile is used as it is: the cluster gets the profile's partition names, fake GPUs for its
gres requests, and no accounting (so its account is accepted unchecked and job states come from
squeue). SLURM is stopped in the fixture's teardown, whatever happens in the tests (a SIGTERM
becomes a KeyboardInterrupt, so pytest still tears down; atexit is the last resort).
Needs root, Linux, and SLURM or apt-get (and pip, for snakemake-executor-plugin-slurm when it is
missing); elsewhere it is skipped, with the reason, except under CI=true, where it fails: CI must
keep the profile proven. SPECREJ_SKIP_CLUSTER=1 skips it anywhere.
"""

from __future__ import annotations

import atexit
import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_checks import assert_summary_matches_the_run_files, assert_tables_and_figures

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TESTS = ROOT / "tests"
PROFILE = ROOT / "profiles" / "slurm"
TINY_CONFIG = TESTS / "workflow" / "config.yaml"
FAILING = HERE / "failing" / "Snakefile"
# A fixed folder: a rerun after a killed run (no teardown) stops that run's daemons first.
STATE = Path(os.environ.get("SPECREJ_SLURM_TEST_DIR", "/tmp/specrej-slurm-test"))
PLUGIN = "snakemake-executor-plugin-slurm==2.8.0"
WORKFLOW_TIMEOUT_S = 900  # the tiny workflow takes about 2 to 4 minutes through SLURM on 2 cores; a busy machine twice that
FAILING_TIMEOUT_S = 240
# Status checks every few seconds instead of the plugin's 40: the jobs here take seconds, not
# hours. The plugin keeps squeue while MinJobAge (3600 here) >= 3 x this.
FAST_STATUS = ["--slurm-init-seconds-before-status-checks", "2"]
SLURM_COMMANDS = ("slurmctld", "slurmd", "sbatch", "squeue", "munged")


def why_not() -> str | None:
    """Why this machine cannot run a local SLURM (None: it can)."""
    if os.environ.get("SPECREJ_SKIP_CLUSTER") == "1":
        return "SPECREJ_SKIP_CLUSTER=1"
    if not sys.platform.startswith("linux"):
        return "a local SLURM needs Linux"
    if os.geteuid() != 0:
        return "needs root: it installs SLURM with apt-get and starts munged, slurmctld and slurmd"
    if not all(shutil.which(c) or Path("/usr/sbin", c).exists() for c in SLURM_COMMANDS) \
            and not shutil.which("apt-get"):
        return "SLURM is not installed and there is no apt-get to install it"
    if importlib.util.find_spec("snakemake") is None:
        return "snakemake is not installed (the `workflow` extra)"
    return None


def unavailable(message: str):
    """A missing prerequisite that the fixture tried to install: a failure in CI, else a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def ensure_plugin():
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", PLUGIN],
                                capture_output=True, text=True, timeout=300)
        importlib.invalidate_caches()
        if result.returncode or importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
            unavailable(f"could not install {PLUGIN}: {result.stderr[-2000:]}")


def profile() -> dict:
    import yaml

    return yaml.safe_load((PROFILE / "config.yaml").read_text())


def profile_partitions() -> list[str]:
    """The profile's partitions, the default one (default-resources) first."""
    config = profile()
    names = [config["default-resources"]["slurm_partition"]]
    for resources in config.get("set-resources", {}).values():
        if resources.get("slurm_partition") and resources["slurm_partition"] not in names:
            names.append(resources["slurm_partition"])
    return [str(n) for n in names]


def slurm_env() -> dict:
    return {**os.environ, "SPECREJ_SLURM_DIR": str(STATE), "SPECREJ_SLURM_PARTITIONS": ",".join(profile_partitions()),
            "SLURM_CONF": str(STATE / "slurm.conf")}


def slurm_down():
    subprocess.run(["bash", str(HERE / "slurm_down.sh")], env=slurm_env(), timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def logs_tail(lines: int = 30) -> str:
    out = []
    for name in ("log/slurmctld.log", "log/slurmd.log"):
        path = STATE / name
        if path.exists():
            out.append(f"--- {path} (tail)\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(out)


@pytest.fixture(scope="module")
def slurm():
    reason = why_not()
    if reason and os.environ.get("SPECREJ_SKIP_CLUSTER") != "1":
        unavailable(reason)  # CI (root, apt) must run it: there a reason to skip is a failure
    elif reason:
        pytest.skip(reason)
    ensure_plugin()
    previous = signal.signal(signal.SIGTERM, _interrupted)
    atexit.register(slurm_down)
    try:
        up = subprocess.run(["bash", str(HERE / "slurm_up.sh")], env=slurm_env(), capture_output=True, text=True,
                            timeout=600)
        if up.returncode:
            pytest.fail(f"slurm_up.sh failed ({up.returncode}):\n{up.stdout}{up.stderr}")
        yield slurm_env()
    finally:
        slurm_down()
        atexit.unregister(slurm_down)
        signal.signal(signal.SIGTERM, previous)
    # every daemon of this cluster is gone, and so are its PID files
    for pidfile in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
        assert not (STATE / pidfile).exists(), pidfile
    assert not any(str(STATE) in _cmdline(pid) for pid in _pids()), "a daemon of the test cluster survived"


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def snakemake(*args, cwd: Path, env: dict, timeout: float) -> tuple[int, str, float]:
    """Run snakemake in its own process group; on timeout kill the group and fail (no hang)."""
    command = [sys.executable, "-m", "snakemake", *map(str, args)]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"snakemake did not finish within {timeout} s (a hang?):\n{output[-6000:]}\n{logs_tail()}")
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): no snakemake is left behind
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process.returncode, output, time.monotonic() - start


def submissions(output: str) -> dict[str, str]:
    """{SLURM job id: rule} from Snakemake's log lines 'Job N has been submitted with SLURM jobid M
    (log: .../slurm_logs/rule_<rule>/...)'."""
    found = re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_([^/\s]+)/", output)
    return dict(found)


def squeue_jobs(env: dict) -> dict[str, dict]:
    """Every job slurmctld still knows (MinJobAge=3600 keeps finished ones)."""
    listing = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%P|%T|%b"], env=env, capture_output=True,
                             text=True, timeout=30, check=True).stdout
    jobs = {}
    for line in listing.splitlines():
        job_id, partition, state, tres = line.strip().split("|")
        jobs[job_id] = {"partition": partition, "state": state, "tres": tres}
    return jobs


def planned_jobs(output: str) -> dict[str, int]:
    """The first 'Job stats' table of a run: {rule: count}."""
    counts = {}
    for line in output[output.index("Job stats:"):].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_tiny_workflow_runs_through_slurm(slurm, generator_dir, tmp_path):
    overlay = tmp_path / "tiny-model.yaml"
    overlay.write_text(f"generators:\n  tiny: {{model: {json.dumps(str(generator_dir))}, label: Tiny}}\n")
    env = {**slurm, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    args = ["--snakefile", ROOT / "Snakefile", "--profile", PROFILE, "--configfile", TINY_CONFIG, overlay]

    code, output, seconds = snakemake(*args, *FAST_STATUS, cwd=tmp_path, env=env, timeout=WORKFLOW_TIMEOUT_S)
    print(f"\ntiny workflow through SLURM: {seconds:.0f} s")
    assert code == 0, output[-8000:] + "\n" + logs_tail()
    assert "Falling back to 'sacct'" not in output  # job states came from squeue

    # every job but the local rules went through SLURM, to the profile's partition and gres
    planned = planned_jobs(output)
    local = {"all", "prompt_chunk", "fetch_model"}  # the Snakefile's localrules
    submitted = submissions(output)
    assert sorted(submitted.values()) == sorted(r for r, n in planned.items() if r not in local and r != "total"
                                                for _ in range(n))
    config = profile()
    jobs = squeue_jobs(env)
    controller_log = (STATE / "log/slurmctld.log").read_text(errors="replace")
    for job_id, rule in submitted.items():
        assert jobs[job_id]["state"] == "COMPLETED", (job_id, rule, jobs.get(job_id))
        # slurmctld took it, started it (main scheduler or backfill) and saw it end
        for event in (rf"_slurm_rpc_submit_batch_job: JobId={job_id} ",
                      rf"(sched: Allocate|sched/backfill: _start_job: Started) JobId={job_id} ",
                      rf"_job_complete: JobId={job_id} done"):
            assert re.search(event, controller_log), (job_id, rule, event)
        wanted = {**config["default-resources"], **config.get("set-resources", {}).get(rule, {})}
        assert jobs[job_id]["partition"] == str(wanted["slurm_partition"]), (rule, jobs[job_id])
        if "gres" in wanted:  # the GPU rules asked SLURM for their GPU
            assert jobs[job_id]["tres"] == f"gres:{wanted['gres']}", (rule, jobs[job_id])
    assert {"reference_shard", "method_run", "calibration_fit", "table1"} <= set(submitted.values())

    # every output of `rule all` exists, and nothing is left to do
    results = tmp_path / "results"
    assert_tables_and_figures(results)
    assert_summary_matches_the_run_files(results)
    assert (results / "correlation/summary.csv").stat().st_size > 0
    for pair in ("tiny--logprob", "tiny--letter-e"):
        for run in ("bon/n2", "bon/n4", "bon/n8", "sr/alpha0.5", "sr/alpha0.75", "sr/delta0.2"):
            assert (results / "runs" / pair / f"{run}.jsonl").stat().st_size > 0
    assert {row["prompt_id"] for row in _rows(results / "failed_prompts.csv")} == {"empty"}
    assert [row["Method"] for row in _rows(results / "tables/table2.csv")] == \
        ["Bo2", "Bo4", "Bo8", "SR α=0.5", "SR α=0.75", "SR δ=0.2"]
    code, output, _ = snakemake(*args, "-n", cwd=tmp_path, env=env, timeout=120)
    assert code == 0 and "Nothing to be done" in output, output[-3000:]


def test_failing_job_is_reported_as_failed_not_awaited(slurm, tmp_path):
    code, output, seconds = snakemake("--snakefile", FAILING, "--profile", PROFILE, "--keep-going", *FAST_STATUS,
                                      cwd=tmp_path, env=slurm, timeout=FAILING_TIMEOUT_S)
    print(f"\nfailing workflow through SLURM: {seconds:.0f} s, exit code {code}")
    assert code != 0, output[-4000:]
    submitted = submissions(output)
    failed = [job_id for job_id, rule in submitted.items() if rule == "fails"]
    assert len(failed) == 1 + int(profile().get("retries", 0)), output[-4000:]  # retried once, as the profile says
    jobs = squeue_jobs(slurm)
    for job_id in failed:
        assert f"SLURM-job '{job_id}' failed, SLURM status is: 'FAILED'" in output, output[-4000:]
        assert jobs[job_id]["state"] == "FAILED"
    assert "Error in rule fails" in output
    assert [rule for rule in submitted.values() if rule == "ok"] == ["ok"]
    assert (tmp_path / "ok.txt").read_text() == "ok\n"  # the other job finished (--keep-going)
    assert not (tmp_path / "fails.txt").exists()
