"""The Snakemake workflow: plans of both configs, the config schema's messages, and a full run of
the tiny configuration (killed part-way, then rerun) that checks every table and figure."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_checks import assert_summary_matches_the_run_files, assert_tables_and_figures

pytest.importorskip("snakemake")

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TINY_CONFIG = TESTS / "workflow" / "config.yaml"


def snakemake_command(*args) -> list[str]:
    # the interpreter running the tests has snakemake (the `workflow` extra) installed
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *map(str, args)]


def snakemake(*args, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_command(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: {rule: count}."""
    lines = output[output.index("Job stats:"):].splitlines()[3:]
    counts = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def methods_overlay(*entries, without: str | None = None) -> str:
    """A --configfile that adds `entries` to the tiny config's methods (a list in a config file
    replaces the one before it whole, so the overlay repeats the tiny config's), less `without`."""
    import yaml

    tiny = yaml.safe_load(TINY_CONFIG.read_text())["methods"]
    return yaml.safe_dump({"methods": [e for e in tiny if e["name"] != without] + list(entries)})


@pytest.mark.parametrize("configfile, expected", [
    # 12 prompts in 1 chunk, 1 pair (the log-prob reward): 8 shards of Bo16 (the ladder Bo16..Bo128,
    # nested), SR's 3 alphas, the random-halting control at SR's alphas 0.5 and 0.9, ST-BoN at N = 32,
    # DeepConf at N = 32 and Pandora at N = 64; the correlation study scores the Best-of-N responses
    # (no generation of its own); no adaptive SR; one calibration (eq. 7's modelled compute)
    (None, {"reference_shard": 8, "reference_direct": None, "method_run": 3 + 2 + 1 + 1 + 1,
            "generate_correlation": None, "score_prefixes": 1, "calibration_fit": None, "adaptive_survival": None,
            "merge_reference": 4, "merge_method": 3 + 2 + 1 + 1 + 1, "table1": 1, "table2": 1, "calibrate": 1,
            "figure2": 1, "figure3": 1, "figure4": 1, "correlation_summary": 1, "decisions": 1}),
    # config/adaptive.yaml over it: adaptive SR at 2 deltas (method_run too), fit on 10 held-out
    # prompts (1 chunk: Best-of-N shards 0-1, scored)
    ("config/adaptive.yaml", {"reference_shard": 8 + 2, "method_run": 8 + 2, "score_prefixes": 1 + 1,
                              "calibration_fit": 1, "adaptive_survival": 1, "merge_method": 8 + 2}),
    # config/all-methods.yaml over it: the self-certainty pair too, Best-of-N and SR for both pairs; for
    # the log-prob pair the control at alphas 0.5, 0.7, 0.9, ST-BoN at N = 32 and 128, DeepConf at N = 32
    # and 64 x eta 0.1 and 0.9, Pandora at N = 128 x 3 costs, consensus at N = 16
    ("config/all-methods.yaml", {"reference_shard": 2 * 8, "method_run": 2 * 3 + 3 + 2 + 4 + 3 + 1,
                                 "merge_method": 2 * 3 + 3 + 2 + 4 + 3 + 1, "calibrate": 2}),
    # config/compiled.yaml over it: the default study's jobs, the generator's step compiled
    ("config/compiled.yaml", {"reference_shard": 8, "method_run": 3 + 2 + 1 + 1 + 1,
                              "merge_method": 3 + 2 + 1 + 1 + 1}),
    # 12 pairs x 10 chunks of 10 prompts: 32 shards of Bo120, 9 alphas; the 9 reward-model pairs
    # get the correlation study, every N is a multiple of 120 (no direct runs)
    # config/grid.yaml: 2 pairs x the default's 8 shards of Bo16 and 3 alphas, no other method; both
    # pairs in the correlation study (Figure 4's two rows); two models fetched and no judge's
    ("config/grid.yaml", {"fetch_model": 2, "reference_shard": 2 * 8, "method_run": 2 * 3, "merge_reference": 2 * 4,
                          "merge_method": 2 * 3, "score_prefixes": 2, "correlation_statistics": 2,
                          "correlation_summary": 1, "figure3": 1, "figure4": 1, "table1": 1, "table2": 1,
                          "calibrate": None}),
    ("config/paper.yaml", {"reference_shard": 12 * 10 * 32, "calibrate": 12, "reference_direct": None, "method_run": 12 * 10 * 9,
                           "merge_reference": 12 * 6, "merge_method": 12 * 9, "generate_correlation": None, "score_prefixes": 9 * 10,
                           "calibration_fit": None,
                           "prompt_chunk": 10, "table1": 1, "table2": 1}),
])
def test_dry_run_plans_every_output(tmp_path, configfile, expected):
    args = ["-n", "--cores", "2", "--quiet", "rules"]
    if configfile:
        args += ["--configfile", ROOT / configfile]
    result = snakemake(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    counts = job_counts(result.stdout + result.stderr)
    assert {rule: counts.get(rule) for rule in expected} == expected


def test_grid_config_writes_only_under_its_own_results_dir(tmp_path):
    """Every output, log and benchmark of config/grid.yaml's plan lies under results/grid/, so a
    run of it never touches the default study's results/."""
    result = snakemake("-n", "--cores", "2", "--configfile", ROOT / "config/grid.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    paths = [path.strip() for line in result.stdout.splitlines()
             if line.strip().startswith(("output:", "log:", "benchmark:"))
             for path in line.split(":", 1)[1].split(",")]
    assert len(paths) > 100 and all(path.startswith("results/grid/") for path in paths), \
        [path for path in paths if not path.startswith("results/grid/")][:5]
    assert "results/grid/figures/figure4.png" in paths and "results/grid/summary.md" in paths


def test_paper_config_is_the_papers_setting(tmp_path):
    import yaml

    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    shared = ROOT.parent / "shared/data/alpaca_farm_100.json"  # beside the checkout; CI always has it
    if not shared.exists() and os.environ.get("CI") != "true":
        pytest.skip(f"{shared} is absent: the paper's prompt indices cannot be checked here")
    # the 100 prompts are the paper's, by af_eval_idx, in its order
    assert paper["prompts"]["select"] == [row["af_eval_idx"] for row in json.loads(shared.read_text())]
    assert len(set(paper["prompts"]["select"])) == 100
    assert paper["prompts"]["source"] == "tatsu-lab/alpaca_farm:alpaca_farm_evaluation"
    models = {g["model"] for g in paper["generators"].values()}
    assert models == {"meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.3", "meta-llama/Meta-Llama-3-8B-Instruct"}
    rms = {r["model"]: r.get("trust_remote_code", False) for r in paper["rewards"].values()}
    assert rms == {"weqweasdas/RM-Mistral-7B": False, "sfairXC/FsfairX-LLaMA3-RM-v0.1": False,
                   "RLHFlow/ArmoRM-Llama3-8B-v0.1": True, "logprob": False}
    bon, sr = paper["methods"]
    assert bon["name"] == "bon" and bon["grid"]["n"] == [120 * 2**i for i in range(6)] and bon["shard_size"] == 120
    assert sr["name"] == "sr" and sr["grid"]["alpha"] == [round(0.1 * i, 1) for i in range(1, 10)]
    # the default config's pair must not leak into the paper's plan (--configfile is merged)
    result = snakemake("-n", "--cores", "1", "--configfile", ROOT / "config/paper.yaml", cwd=tmp_path)
    assert result.returncode == 0 and "smollm2" not in result.stdout


@pytest.mark.parametrize("config, message", [
    ("bon:\n  n: [8, 16]\n", "invalid config: bon: is no longer read: every method is a methods: entry"),
    ("sampling:\n  max_new_tokenz: 3\n", "invalid config: sampling: Additional properties are not allowed "
                                         "('max_new_tokenz' was unexpected)"),
    ("methods:\n  - {name: bon, grid: {n: [8]}}\n  - {name: sr, grid: {alpha: [0.5, 1.0]}}\n",
     "invalid config: methods[1].grid.alpha must be in [0, 1), got 1.0"),
    ("methods:\n  - {name: bon, grid: {n: [8]}, memory_budget: lots}\n",
     "invalid config: methods[0].memory_budget: 'lots' is not valid: expected a memory size"),
    ("pairs:\n  - {generator: nope, reward: logprob}\n",
     "invalid config: pairs[0].generator: 'nope' is not defined under generators"),
    ("methods:\n  - {name: bon, grid: {n: [8, 48]}, shard_size: 32}\n",
     "invalid config: methods[0].grid.n: 48 above shard_size=32 must be multiples"),
    ("prompts:\n  source: no/such/prompts.json\n", "invalid config: prompts.source: file not found"),
    # results_dir naming a file (here the config file itself): one line, not NotADirectoryError
    ("results_dir: bad.yaml\n", "invalid config: results_dir: bad.yaml is a file, not a folder"),
    ("prompts:\n  source: tatsu-lab/alpaca_farm:alpaca_farm_evaluation\n  select: null\n",
     "give prompts.select (the row indices)"),
    ("evaluation:\n  judge: gpt-4\n", "invalid config: evaluation.judge: 'gpt-4' is not valid: expected null "
                                      "(not evaluated), auto, gpt4_turbo, longest or local:<model>"),
])
def test_bad_config_stops_before_any_job_with_one_message(tmp_path, config, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(config)
    result = snakemake("--cores", "1", "--configfile", bad, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr
    assert result.stderr.count("invalid config") == 1
    assert "Failed validating" not in result.stderr  # no schema dump
    assert not (tmp_path / "results").exists()  # nothing ran


def test_a_profile_setting_resources_for_a_rule_the_workflow_lacks_stops_it(tmp_path):
    """Snakemake itself ignores --set-resources for an unknown rule (a GPU job would go to the CPU
    partition); the workflow stops with the rule's new name."""
    result = snakemake("-n", "--cores", "1", "--set-resources", "bon_shard:gpu=1", cwd=tmp_path)
    assert result.returncode != 0
    assert ("the profile or command line sets resources or threads for rules this workflow does not have: "
            "bon_shard (set-resources; now reference_shard)") in result.stdout + result.stderr


def test_a_failed_job_ends_with_its_name_its_log_and_the_command_that_resumes(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_text("not a GGUF file")
    overlay = tmp_path / "broken-model.yaml"
    overlay.write_text(f"generators:\n  tiny: {{model: {json.dumps(str(broken))}, label: Tiny}}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "SPECREJ_CACHE": str(tmp_path / "cache")}
    args = ["--cores", "2", "--configfile", TINY_CONFIG, overlay]
    result = snakemake(*args, cwd=tmp_path, env=env)
    assert result.returncode != 0
    log = "results/logs/fetch_model/" + f"broken.gguf-{hashlib.sha256(str(broken).encode()).hexdigest()[:8]}.log"
    message = (tmp_path / "results/logs/failure.txt").read_text().splitlines()
    assert message[0] == "specrej: 1 job(s) failed; finished jobs are kept:"
    assert message[1].startswith("  fetch_model (model=broken.gguf-") and message[1].endswith(f": log {log}")
    assert message[2].startswith(f"    last line: specrej: error: cannot convert {broken}: not a GGUF file")
    assert message[3] == ("Fix the cause, then resume with the same command: snakemake "
                          + " ".join(shlex.quote(str(a)) for a in ["--snakefile", ROOT / "Snakefile", *args]))
    # Snakemake prints it after its own error report; only its four closing lines follow (where its
    # log is, the time, "WorkflowError: At least one job did not complete"); `make study` repeats it
    tail = result.stderr.strip().splitlines()
    end = max(i for i, line in enumerate(tail) if line.startswith("Fix the cause"))
    assert tail[end - 3:end + 1] == message
    assert len(tail) - end - 1 <= 4, tail[end:]
    assert "Traceback" not in (tmp_path / log).read_text()  # the engine's error is one line


# ------------------------------------------------------------------------------------------
# the full tiny run: killed part-way, rerun, every output checked
# ------------------------------------------------------------------------------------------

# Best-of-N by N, then the other methods by name (analysis.settings.configuration_order): the
# outside method (first-k), SR, adaptive SR
METHODS = ["Bo2", "Bo4", "Bo8", "Top 2 of 6", "SR α=0.5", "SR α=0.75", "SR δ=0.2"]


def alpaca_eval_available() -> bool:
    from analysis.alpaca_eval_adapter import alpaca_eval_available

    return alpaca_eval_available()


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _finished_generation_outputs(results: Path) -> dict[Path, int]:
    runs = results / "runs"
    if not runs.exists():
        return {}
    return {p: p.stat().st_mtime_ns for p in runs.glob("*/*/*/*.jsonl")}


def _incomplete_outputs(workdir: Path) -> set[Path]:
    """The outputs Snakemake marked incomplete (.snakemake/incomplete/<base64 of the path>)."""
    import base64
    import binascii

    folder = workdir / ".snakemake" / "incomplete"
    paths = set()
    for marker in folder.iterdir() if folder.exists() else []:
        try:
            paths.add(workdir / base64.urlsafe_b64decode(marker.name).decode())
        except (binascii.Error, UnicodeDecodeError):
            continue
    return paths


@pytest.mark.slow
def test_tiny_run_from_an_empty_cache_survives_a_kill_and_produces_every_output(tmp_path):
    """The tiny config as a user's first run meets it: the real default model, an empty
    SPECREJ_CACHE, two jobs at a time. The model is fetched and converted once, by its own job,
    before any generation job starts."""
    from test_methods import OUTSIDE_METHOD

    # a method from outside the project: one file of the test's own, named in a config
    (tmp_path / "outside_method.py").write_text(OUTSIDE_METHOD)
    methods = tmp_path / "methods.yaml"
    methods.write_text(methods_overlay({"name": "python:outside_method:PREFIX_TOP_K", "grid": {"n": [6]}}))
    env = {**os.environ, "SPECREJ_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(TESTS), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    args = ["--cores", "2", "--configfile", TINY_CONFIG, methods]
    results = tmp_path / "results"

    # 1. start, and kill the whole process tree (as a lost node would) once some generations are done
    process = subprocess.Popen(snakemake_command(*args), cwd=tmp_path, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(_finished_generation_outputs(results)) < 4 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, "the run ended before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # finished: its output is there and Snakemake recorded the job as done (a job killed between
    # its move onto the output and that record is incomplete, and rightly redone)
    before = {path: mtime for path, mtime in _finished_generation_outputs(results).items()
              if path not in _incomplete_outputs(tmp_path)}
    assert before, "no generation finished before the kill"
    for path in before:  # outputs appear only when complete (moved from the partial file)
        assert all(json.loads(line)["prompt_id"] for line in path.read_text().splitlines())

    # 2. a killed run leaves its lock: unlock, rerun, and finish without redoing finished jobs
    assert snakemake(*args, "--unlock", cwd=tmp_path, env=env).returncode == 0
    result = snakemake(*args, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    after = _finished_generation_outputs(results)
    assert {p: after[p] for p in before} == before, "finished generations were redone"
    assert snakemake(*args, "-n", cwd=tmp_path, env=env).stdout.count("Nothing to be done") == 1

    # the model was prepared by its fetch job alone: no generation job fetched or converted it
    fetch_logs = list((results / "logs/fetch_model").glob("*.log"))
    assert len(fetch_logs) == 1 and "specrej: converting" in fetch_logs[0].read_text()
    generation_logs = [p for rule in ("reference_shard", "reference_direct", "method_run")
                       for p in (results / "logs" / rule).rglob("*.log")]
    assert generation_logs and not [p for p in generation_logs
                                    if "specrej: converting" in p.read_text() or "waiting for" in p.read_text()]
    assert json.loads(next((results / "models").glob("*.json")).read_text())["path"] == \
        str(tmp_path / "cache" / "SmolLM2-135M-Instruct")

    # 3. every table and figure, with the expected rows
    assert_tables_and_figures(results)
    assert_summary_matches_the_run_files(results)  # eq. 7-8 recomputed from the run files alone

    table1 = _rows(results / "tables/table1.csv")
    assert [row["Method"] for row in table1] == METHODS
    if alpaca_eval_available():  # judge `longest`: every method judged against Bo2 on the 2 answered prompts
        assert float(table1[0]["Tiny WR"]) == 50.0 and table1[0]["status"].startswith("reference")
        for row in table1[1:]:
            assert 0 <= float(row["Tiny WR"]) <= 100 and row["status"].startswith("evaluated by longest")
        inputs = _rows(results / "tables/table1_inputs.csv")
        assert {row["n"] for row in inputs} == {"2"} and {row["judge"] for row in inputs} == {"longest"}
        assert "Judge: longest" in (results / "tables/table1.md").read_text()
        assert len(list((results / "evaluation/annotations/Tiny").glob("*.json"))) == len(METHODS) - 1
    else:
        assert all(row["Tiny WR"] == "" and row["status"].startswith("not evaluated: alpaca_eval") for row in table1)
    table2 = _rows(results / "tables/table2.csv")
    assert [row["Method"] for row in table2] == METHODS
    assert all(float(row["Tiny PPL"]) > 1 and float(row["Tiny Speedup"]) > 0 for row in table2)
    assert float(table2[METHODS.index("Bo8")]["Tiny Speedup"]) == pytest.approx(1.0)
    for stem in ("table1", "table2"):  # the failed prompt is named under the tables
        assert "Excluded prompts" in (results / "tables" / f"{stem}.md").read_text()
        assert "empty (" in (results / "tables" / f"{stem}.md").read_text()

    failed = _rows(results / "failed_prompts.csv")
    assert {row["prompt_id"] for row in failed} == {"empty"}
    runs = {row["run"].split("/", 2)[2] for row in failed}
    assert runs >= {"tiny--logprob/bon/n8.jsonl", "tiny--letter-e/sr/alpha0.5.jsonl"}
    assert all("empty prompt" in row["error"] for row in failed)

    summary = _rows(results / "metrics/summary.csv")
    assert {(row["pair"], row["method_label"]) for row in summary} == {
        (pair, m) for pair in ("Tiny / logprob", "Tiny / letter e") for m in METHODS}
    assert {row["n_prompts"] for row in summary} == {"2"}  # the failed prompt is left out
    # FLOPs are counted by the session as the work happens: the outside method's records have them too
    assert all(float(row["relative_flops"]) > 0 for row in summary)

    # the method from outside the project: its own run file, records, rows and headline line
    for pair in ("tiny--logprob", "tiny--letter-e"):
        top = [json.loads(line) for line in
               (results / f"runs/{pair}/prefix-top-k/n6-keep2.jsonl").read_text().splitlines()]
        assert [r["prompt_id"] for r in top] == ["sea", "gravity", "empty"]
        assert all(r["params"]["setting"]["label"] == "Top 2 of 6" for r in top if "error" not in r)
    assert "Top 2 of 6" in (results / "summary.md").read_text()

    correlation = _rows(results / "correlation/summary.csv")
    assert {(row["pair"], row["tau"]) for row in correlation} == {
        (pair, tau) for pair in ("Tiny / logprob", "Tiny / letter e") for tau in ("2", "4", "8")}
    assert {"pearson", "kendall", "tokens_saved_frac", "best_survives_alpha_0.5"} <= {r["metric"] for r in correlation}

    # 4. per-run JSONL: one record per prompt, Bo8 merged from two shards of 4
    bo8 = [json.loads(line) for line in (results / "runs/tiny--logprob/bon/n8.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in bo8] == ["sea", "gravity", "empty"]
    answered = [r for r in bo8 if "error" not in r]
    assert all(r["params"]["n"] == 8 and r["params"]["shards"] == 2 and r["num_candidates"] == 8 for r in answered)
    shards = [[json.loads(line) for line in (results / f"runs/tiny--logprob/bon/shard{k}/chunk0000.jsonl")
               .read_text().splitlines()] for k in (0, 1)]
    for i, record in enumerate(answered):
        assert record["best"]["score"] == max(s[i]["best"]["score"] for s in shards)
        assert record["tokens"]["generated"] == sum(s[i]["tokens"]["generated"] for s in shards)
    assert not list((results / ".partial").rglob("*.jsonl"))  # every partial file was moved onto its output

    # 5. adaptive SR: its fit from the held-out prompts only, the rule of every round recorded
    import pandas as pd

    for pair in ("tiny--logprob", "tiny--letter-e"):
        assert [row["tau"] for row in _rows(results / f"adaptive/{pair}/fits.csv")] == ["2", "4", "8"]
        calibration = pd.read_parquet(results / f"adaptive/{pair}/calibration_prefixes.parquet")
        assert set(calibration["prompt_id"]) == {"held-out-bread", "held-out-moon"}
        records = [json.loads(line) for line in (results / f"runs/{pair}/sr/delta0.2.jsonl").read_text().splitlines()]
        assert [r["prompt_id"] for r in records] == ["sea", "gravity", "empty"]
        answered = [r for r in records if "error" not in r]
        assert all(r["params"]["rejection"] == {"rule": "adaptive", "delta": 0.2, "correction": "bonferroni",
                                                 "fit": "study", "fallback_alpha": 0.5} for r in answered)
        rounds = [rnd for r in answered for rnd in r["rounds"]]
        assert rounds and all(rnd["rule"]["source"] in ("fit", "interpolated") for rnd in rounds)
        survival = _rows(results / f"adaptive/{pair}/survival.csv")
        assert {(row["tau"], row["delta"]) for row in survival} == {("2", "0.2"), ("4", "0.2"), ("8", "0.2")}
    assert {row["method_label"] for row in _rows(results / "metrics/adaptive.csv")} == {"SR δ=0.2"}
    assert "### Adaptive rejection" in (results / "summary.md").read_text()

    # 6. the report holds every figure and table
    report = tmp_path / "report.zip"
    result = snakemake(*args, "--report", report, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    import zipfile

    names = "\n".join(zipfile.ZipFile(report).namelist())
    for name in ("figure2.png", "figure3.png", "figure4.png", "table1.csv", "table2.csv", "summary.csv",
                 "failed_prompts.csv"):
        assert name in names


def test_an_edited_outside_method_reruns_its_jobs(tmp_path):
    """A `python:module:attr` method's module is an input of its method_run jobs: once every
    input of one job is older than its output nothing is to be done, and editing the module
    reruns that job (a dry run, on files laid down by hand)."""
    sys.path.insert(0, str(ROOT / "workflow"))
    import plan

    from test_methods import OUTSIDE_METHOD

    module = tmp_path / "outside_method.py"
    module.write_text(OUTSIDE_METHOD)
    methods = tmp_path / "methods.yaml"
    methods.write_text(methods_overlay({"name": "python:outside_method:PREFIX_TOP_K", "grid": {"n": [6]}},
                                       without="sr-adaptive"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    sys.path.insert(0, str(tmp_path))
    try:
        from specrej.methods import get_method

        method = get_method("python:outside_method:PREFIX_TOP_K")
        setting = method.setting_name(method.check({"n": 6}))
    finally:
        sys.path.remove(str(tmp_path))
    results = tmp_path / "results"
    target = results / "runs" / "tiny--logprob" / (method.record_method or method.name) / setting / "chunk0000.jsonl"
    inputs = [results / "prompts" / "prompts.jsonl", results / "prompts" / "chunks" / "chunk0000.jsonl",
              *(results / "models" / f"{name}.json" for name in [plan.model_name("default")])]
    for path in [*inputs, target]:  # inputs first, the output last: the newest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        os.utime(path, (time.time() - 60 + len(path.parts), time.time() - 60 + len(path.parts)))
    os.utime(module, (time.time() - 600, time.time() - 600))
    os.utime(target, None)
    args = ["-n", "--cores", "1", target.relative_to(tmp_path), "--configfile", TINY_CONFIG, methods]
    result = snakemake(*args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Nothing to be done" in result.stdout + result.stderr, result.stdout + result.stderr
    module.write_text(OUTSIDE_METHOD + "\n# edited\n")
    result = snakemake(*args, cwd=tmp_path, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "rule method_run" in output and "outside_method.py" in output, output
