"""What the workflow says before, after and when it stops, from Snakemake's own records.

- ``study_overview``: before the first job (``onstart``), the study's jobs as Snakemake's DAG
  holds them, counted and timed by ``job_seconds``.
- ``failure_message``: when a job failed (``onerror``), each job Snakemake's scheduler recorded
  as failed, its log's last line, and the command that resumes.
- ``failed_prompts_message`` / ``out_of_range_messages``: after a run (``onsuccess``).

A job is given as ``(rule name, {wildcard: value})``, which common.smk reads off Snakemake's
``Job`` objects (``job.rule.name``, ``job.wildcards_dict``).
"""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

from plan import Plan, local_judge, pair_labels
from specrej.records.step_profile import cpu_name, read_calibration  # torch-free

GENERATION_RULES = ("reference_shard", "reference_direct", "method_run")

# The 2-core CPU that the default study was timed on (`make study` on a fresh clone, its 45 jobs on
# 24 prompts, two jobs at a time); each job's seconds from its benchmark file, per prompt and decode
# step. The run, and the times these constants come from: docs/results.md, "Time estimates of the workflow".
MEASURED_CORES = 2
GENERATION_START_S = 5.9  # a generation job's seconds beyond its decode steps: loading the model
FALLBACK_STEP_S = 0.112  # per prompt and decode step, for a method that declares no step_seconds (SR's)
FALLBACK_BON_STEP_S = 0.054  # Best-of-N's per prompt and decode step of BON_MEASURED_ROWS rows
BON_MEASURED_ROWS = 16  # the rows per prompt that Best-of-N's step_seconds was measured at
SCORE_PREFIXES_S = 3.3  # one chunk's prefixes under the log-prob reward
FETCH_MODEL_S = 31.0  # the default model's fetch and conversion, first use
BUILD_GRAPHS_S = 75.0  # one row range's compiled graphs built and measured, first use (`specrej compile --rows`; 63-85 s, d7e0570)
CALIBRATE_S = 96.0  # the default model's calibration on the default grid and samplers, first use (`specrej calibrate`, ef9858a), every core held
JUDGE_COMPARISON_S = 0.41  # Table 1's local judge (local:default), per response pair
ANALYSIS_JOB_S = 0.85  # any other job (merges, statistics, tables, figures)
# the rest of the measured study's wall time, per job: Snakemake's own time, the report, and a core
# left idle while the last jobs wait on others
SNAKEMAKE_JOB_S = 2.3


def step_seconds(spec: str, fallback: float) -> float:
    """A method's declared time per prompt and decode step (`Method.step_seconds`), else `fallback`."""
    from specrej.methods import get_method

    declared = getattr(get_method(spec), "step_seconds", None)
    return fallback if declared is None else declared


def job_seconds(config: dict, plan: Plan, rule: str, wildcards: dict) -> float:
    """About how long one job takes on the measured 2-core CPU, two jobs at a time."""
    chunk = plan.all_chunks.get(wildcards.get("chunk"), ())
    steps = len(chunk) * config["sampling"]["max_new_tokens"]
    if rule in ("reference_shard", "reference_direct"):
        rows = plan.reference["shard_size"] if rule == "reference_shard" else int(wildcards["n"])
        per_row = step_seconds(plan.reference["name"], FALLBACK_BON_STEP_S) / BON_MEASURED_ROWS
        return GENERATION_START_S + steps * rows * per_row
    if rule == "method_run":
        spec = plan.method_runs[(wildcards["method"], wildcards["setting"])]["spec"]
        return GENERATION_START_S + steps * step_seconds(spec, FALLBACK_STEP_S)
    if rule == "win_rates" and local_judge(config):
        runs = len(plan.reference["ladder"]) + len(plan.method_runs)
        prompts = sum(map(len, plan.chunks.values()))
        comparisons = len(plan.table1_pairs) * prompts * (runs - 1)  # every run against Bo-N_min
        return GENERATION_START_S + comparisons * JUDGE_COMPARISON_S
    return {"score_prefixes": SCORE_PREFIXES_S, "fetch_model": FETCH_MODEL_S, "compiled_graphs": BUILD_GRAPHS_S,
            "calibrate": MEASURED_CORES * CALIBRATE_S, "all": 0.0}.get(rule, ANALYSIS_JOB_S)


def jobs_seconds(config: dict, plan: Plan, jobs: list[tuple[str, dict]], scale: float = 1.0) -> float:
    """About how long `jobs` take on the measured 2-core CPU: their seconds two at a time, plus
    Snakemake's own time per job; the generation jobs' steps `scale` times as long (`machine_scale`)."""
    def seconds(rule: str, wildcards: dict) -> float:
        measured = job_seconds(config, plan, rule, wildcards)
        return GENERATION_START_S + (measured - GENERATION_START_S) * scale if rule in GENERATION_RULES else measured

    return sum(seconds(rule, wildcards) for rule, wildcards in jobs) / MEASURED_CORES + SNAKEMAKE_JOB_S * len(jobs)


def machine_scale(results_dir: str | Path, reference: str) -> tuple[float, str] | None:
    """How long this machine's 16-row decode step takes against the measured study's (the declared
    rate of `reference`, the Best-of-N method), from this machine's calibration, and the words that
    name it: the one an earlier run of the study kept in <results_dir>/calibration/ (the first found),
    else the newest that `specrej calibrate` kept for this CPU beside the compiled graphs (any study's,
    `calibration_files`); None where there is none."""
    for calibration in map(read_calibration, calibration_files(results_dir)):
        if calibration is None or calibration.get("cpu") != cpu_name():
            continue
        try:
            forward, sample = calibration["forward"]["plain"], calibration["sample"]["plain"]
            step = forward["seconds"][forward["rows"].index(BON_MEASURED_ROWS)][0] + \
                sample["seconds"][sample["rows"].index(BON_MEASURED_ROWS)]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        rate = step_seconds(reference, FALLBACK_BON_STEP_S)
        return step / rate, (f"this machine's calibration of {str(calibration.get('measured_at', ''))[:10]}: "
                             f"a 16-row step {1000 * step:.0f} ms against the measured {1000 * rate:.0f}")
    return None


def calibration_files(results_dir: str | Path) -> list[Path]:
    """The calibrations an estimate may read, in the order it tries them: <results_dir>/calibration/*.json
    by name, then those kept in $SPECREJ_CACHE/compiled/*/, newest first."""
    from specrej.models.cache import cache_dir

    kept = sorted(cache_dir().glob("compiled/*/calibration-*.json"), key=lambda path: path.stat().st_mtime, reverse=True)
    return sorted(Path(results_dir).glob("calibration/*.json")) + kept


def study_overview(config: dict, plan: Plan, study: list[tuple[str, dict]], left: list[tuple[str, dict]]) -> str:
    """What the study runs and about how long it takes, in three lines; a fourth when `left`
    (the jobs this run has to do) is fewer than `study` (every job of the DAG)."""
    generating = sum(rule in GENERATION_RULES for rule, _ in study)
    pairs = [pair_labels(config, pair)["pair"] for pair in plan.pairs.values()]
    shown = ", ".join(pairs) if len(pairs) <= 4 else f"{', '.join(pairs[:3])} and {len(pairs) - 3} more"
    prompts = sum(map(len, plan.chunks.values()))
    held_out = f" (+ {sum(map(len, plan.calibration_chunks.values()))} held out for {plan.fit_label}'s fit)" \
        if plan.calibration_chunks else ""
    larger = {generator["model"] for generator in config["generators"].values()} != {"default"}
    scale, words = machine_scale(config["results_dir"], plan.reference["name"]) or (1.0, "")
    lines = [(f"specrej: the study: {len(study)} jobs ({generating} of them generating), "
              f"{_count(len(pairs), 'pair')} ({shown}), {prompts} prompts{held_out}, up to "
              f"{config['sampling']['max_new_tokens']} new tokens per response"),
             f"specrej:   {'; '.join(_method_summaries(config, plan))}",
             (f"specrej:   {_duration(jobs_seconds(config, plan, study, scale))} from an empty "
              f"{config['results_dir']}/ on a 2-core CPU (SmolLM2-135M's per-job times, measured 2026-12-03"
              f"{'; larger models take longer' if larger else ''}{'; steps scaled by ' + words if words else ''})"
              "; a GPU is faster")]
    if len(left) < len(study):
        lines.append(f"specrej:   this run has {len(left)} of them left, "
                     f"{_duration(jobs_seconds(config, plan, left, scale))} (finished jobs are kept)")
    return "\n".join(lines)


def _method_summaries(config: dict, plan: Plan) -> list[str]:
    """The reference's ladder (Best-of-N 16, 32, ...), then each method's settings by their labels."""
    from specrej.methods import get_method

    ref = plan.reference
    shard = ref["shard_size"]
    name = get_method(ref["name"]).display.name
    ladder = f"{name} {', '.join(map(str, ref['ladder']))}" + (f" (shards of {shard})" if shard else "")
    by_method = {}
    for run in plan.method_runs.values():
        method = get_method(run["spec"])
        by_method.setdefault(run["spec"], []).append(method.label(method.check(run["params"])))
    return [ladder] + [_compact(labels) for labels in by_method.values()]


def _compact(labels: list[str]) -> str:
    """Settings' labels that differ only after their "=" once: ["SR α=0.5", "SR α=0.7"] -> "SR α=0.5, 0.7"."""
    head = labels[0].rpartition("=")[0] + "="
    tails = [label.removeprefix(head) for label in labels]
    if head == "=" or not all(label.startswith(head) for label in labels) or any("=" in t for t in tails):
        return ", ".join(labels)
    return head + ", ".join(tails)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _duration(seconds: float) -> str:
    """'under a minute', 'about 24 min', 'about 3.5 h' or 'about 4 days'."""
    minutes = seconds / 60
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"about {minutes:.0f} min"
    hours = minutes / 60
    return f"about {hours:.1f} h" if hours < 48 else f"about {hours / 24:.0f} days"


# --------------------------------------------------------------------------------------
# after a failed run: what `onerror` prints
# --------------------------------------------------------------------------------------


def last_line(path) -> str | None:
    """The last non-blank line of a job's log (the engine ends with its one-line error), if any."""
    try:
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def failure_message(jobs: list[dict], resume: str) -> str:
    """What a user reads when the workflow stopped: each failed job ({rule, wildcards, logs}),
    its log and that log's last line, then the one command that resumes (finished jobs are kept)."""
    if not jobs:
        return (f"specrej: the workflow stopped before any job failed (see Snakemake's message above). "
                f"Fix the cause, then resume with: {resume}")
    lines = [f"specrej: {len(jobs)} job(s) failed; finished jobs are kept:"]
    for job in jobs:
        where = f" ({job['wildcards']})" if job["wildcards"] else ""
        lines.append(f"  {job['rule']}{where}: log {', '.join(job['logs']) or '(none)'}")
        ending = next((line for line in map(last_line, job["logs"]) if line), None)
        if ending:
            lines.append(f"    last line: {ending}")
    lines.append(f"Fix the cause, then resume with the same command: {resume}")
    return "\n".join(lines)


def resume_command(argv: list[str], environ) -> str:
    """The command that resumes this run: SPECREJ_RESUME (the Makefile sets `make study`), else
    Snakemake's own command line."""
    return environ.get("SPECREJ_RESUME") or shlex.join(["snakemake", *argv[1:]])


# --------------------------------------------------------------------------------------
# after a run: what `onsuccess` prints
# --------------------------------------------------------------------------------------


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def failed_prompts_message(results: str) -> str | None:
    """How many prompts failed (they are left out of the tables) and which method settings
    completed no response on any prompt (``run_answered`` 0: rows of their own in the tables),
    or None."""
    path = Path(results) / "failed_prompts.csv"
    rows = _read_csv(path) if path.exists() else []
    if not rows:
        return None
    silent = {row["run"]: row.get("method_label") or row["run"] for row in rows if row.get("run_answered") == "0"}
    partial = [row for row in rows if row["run"] not in silent]
    lines = []
    if partial:
        prompts = sorted({row["prompt_id"] for row in partial})
        lines.append(f"specrej: {len(prompts)} prompt(s) failed in {len(partial)} run(s) and are left out of the "
                     f"tables: {', '.join(prompts)} (see {path})")
    if silent:
        lines.append(f"specrej: {len(silent)} method setting run(s) completed no response on any prompt; the tables "
                     f"show them as such: {', '.join(sorted(set(silent.values())))} (see {path})")
    return "\n".join(lines)


def out_of_range_messages(results: str) -> list[str]:
    """One line per method setting whose score lies outside its pair's Best-of-N curve (its
    BoN-equivalent compute is then not a measurement: extend the reference entry's n or change the operating point)."""
    path = Path(results) / "metrics" / "bon_equivalent.csv"
    rows = _read_csv(path) if path.exists() else []
    where = {"below_range": "below Bo-N_min", "above_range": "above the largest Best-of-N"}
    return [f"specrej: {row['pair']} {row['method_label']} scores {float(row['improvement']):.1f}, "
            f"{where.get(row['bon_equivalent_status'], row['bon_equivalent_status'])}: "
            f"its BoN-equivalent compute is not interpolated (see {path})"
            for row in rows if row["bon_equivalent_status"] != "interpolated"]
