"""The accuracy study's workflow side (issue 50): the reasoning-gym problem set as a prompts file
(workflow/answers_plan.py problem_set_lines), prepare_prompts keeping a prompts file's answers, the plan and
the config schema of config/answers.yaml and config/answers-gpu.yaml, their dry runs, the summary's
accuracy section, and a small accuracy study end to end on the tiny random generator of conftest.py.
Expected values are reasoning-gym's own entries or worked out by hand from config/README.md."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym")
pytest.importorskip("jsonschema")
update_config = pytest.importorskip("snakemake.utils").update_config
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(ROOT / "workflow"))
import answers_plan  # noqa: E402
from test_workflow import job_counts  # noqa: E402 (tests/workflow/test_workflow.py)
import plan  # noqa: E402

ONE_DIGIT_ADDITIONS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"],
                       "allow_parentheses": False, "allow_negation": False}
TINY_SET = {"task": "basic_arithmetic", "settings": ONE_DIGIT_ADDITIONS, "size": 4, "seed": 0}


def entries(size: int, seed: int) -> list[dict]:
    """reasoning-gym's own one-digit additions, as JSON keeps them (tuples as lists)."""
    dataset = reasoning_gym.create_dataset("basic_arithmetic", size=size, seed=seed, **ONE_DIGIT_ADDITIONS)
    return json.loads(json.dumps(list(dataset)))


def merged_config(*overlays) -> dict:
    """config/config.yaml with each overlay (a path or a dict) merged over it, as --configfile does."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for overlay in overlays:
        update_config(config, yaml.safe_load(overlay.read_text()) if isinstance(overlay, Path) else overlay)
    return config


def snakemake(*args, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------
# the problem set
# ------------------------------------------------------------------------------------------


def test_the_problem_set_is_reasoning_gyms_own_problems_with_their_answers():
    lines = answers_plan.problem_set_lines(TINY_SET)
    own = entries(4, 0)
    assert [line["prompt_id"] for line in lines] == [0, 1, 2, 3]
    assert [line["answer"] for line in lines] == [entry["answer"] for entry in own]
    assert [line["entry"] for line in lines] == own  # the task's record, for its own scorer
    assert [line["prompt"] for line in lines] == [entry["question"] for entry in own]  # no shots: the question
    assert {(line["extract"], line["check"]) for line in lines} == {("first-number", "reasoning-gym")}
    assert len({line["problem_set"] for line in lines}) == 1 and lines[0]["problem_set"].startswith("basic_arithmetic-")
    # reasoning-gym's own scorer gives each reference full credit
    score = reasoning_gym.get_score_answer_fn("basic_arithmetic")
    assert all(score(line["answer"], line["entry"]) == 1.0 for line in lines)


def test_shots_are_solved_problems_past_the_set_and_never_one_of_its_questions():
    lines = answers_plan.problem_set_lines({**TINY_SET, "shots": 2})
    questions = [entry["question"] for entry in entries(4, 0)]
    # seed + size = 4 continues reasoning-gym's stream past the set (item i is drawn from seed + i)
    examples = [entry for entry in entries(6, 4) if entry["question"] not in questions][:2]
    preamble = "".join(f"Q: {e['question']}\nA: {e['answer']}\n\n" for e in examples)
    assert [line["prompt"] for line in lines] == [f"{preamble}Q: {question}\nA:" for question in questions]
    assert all(e["question"] not in questions for e in examples)


def test_the_digest_changes_with_the_seed_the_settings_and_the_shots_and_names_nothing_else():
    digest = answers_plan.problem_set_lines(TINY_SET)[0]["problem_set"]
    assert answers_plan.problem_set_lines(dict(TINY_SET))[0]["problem_set"] == digest  # the same spec, the same set
    for change in ({"seed": 1}, {"shots": 1}, {"size": 5}, {"settings": {**ONE_DIGIT_ADDITIONS, "max_digits": 2}}):
        assert answers_plan.problem_set_lines({**TINY_SET, **change})[0]["problem_set"] != digest, change
    # the schema's defaults, filled in or left out, are one spec
    filled = {**TINY_SET, "shots": 0, "extract": "first-number", "check": "reasoning-gym"}
    assert answers_plan.problem_set_lines(filled)[0]["problem_set"] == digest


def test_the_problem_set_script_writes_the_lines_the_plan_reads(tmp_path):
    out, log = tmp_path / "problems.jsonl", tmp_path / "problem_set.log"
    runner = ("import runpy, types\n"
              "params = types.SimpleNamespace(problems=%r, digest=%r)\n"
              "smk = types.SimpleNamespace(params=params, output=[%r], log=[%r], scriptdir=%r)\n"
              "runpy.run_path(%r, init_globals={'snakemake': smk})\n")
    lines = answers_plan.problem_set_lines(TINY_SET)
    script = ROOT / "workflow" / "scripts" / "problem_set.py"
    args = (TINY_SET, lines[0]["problem_set"], str(out), str(log), str(script.parent), str(script))
    result = subprocess.run([sys.executable, "-c", runner % args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr + log.read_text()
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines
    # a reasoning-gym that draws other problems than the plan saw stops the job
    result = subprocess.run([sys.executable, "-c", runner % (TINY_SET, "basic_arithmetic-0000", *args[2:])],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "when the study was planned" in result.stderr + log.read_text()


# ------------------------------------------------------------------------------------------
# prepare_prompts and the plan with a prompts file's answers
# ------------------------------------------------------------------------------------------


def prepare_prompts_module():
    spec = importlib.util.spec_from_file_location("prepare_prompts", ROOT / "workflow/scripts/prepare_prompts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no `snakemake` global: the functions only
    return module


@pytest.fixture
def answered_file(tmp_path) -> Path:
    path = tmp_path / "problems.jsonl"
    rows = [{"prompt_id": "p1", "prompt": "2 + 2 =", "answer": "4"},
            {"prompt_id": "p2", "prompt": "Say 7.", "answer": 7, "extract": "last-number", "check": "numeric"},
            {"prompt_id": "p3", "prompt": "Capital of France?", "answer": "Paris", "extract": "first-line",
             "check": "exact"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_prepare_prompts_keeps_a_prompts_files_answers(answered_file, tmp_path):
    module = prepare_prompts_module()
    lines = [module.prompt_line(item) for item in module.prompt_items(str(answered_file), [2, 0])]
    assert lines == [
        {"prompt_id": "p3", "prompt": "Capital of France?", "answer": "Paris", "extract": "first-line", "check": "exact"},
        {"prompt_id": "p1", "prompt": "2 + 2 =", "answer": "4", "extract": "first-number", "check": "numeric"}]
    # the reasoning-gym set's own lines come through whole
    problems = tmp_path / "rg.jsonl"
    problems.write_text("".join(json.dumps(line) + "\n" for line in answers_plan.problem_set_lines(TINY_SET)))
    assert [module.prompt_line(item) for item in module.prompt_items(str(problems), None)] == \
        answers_plan.problem_set_lines(TINY_SET)
    # a prompt without an answer stays {prompt_id, prompt}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"prompt": "Write a poem."}]))
    assert [module.prompt_line(item) for item in module.prompt_items(str(plain), None)] == \
        [{"prompt_id": 0, "prompt": "Write a poem."}]


def test_the_plan_runs_the_accuracy_study_for_a_file_with_answers(answered_file):
    config = merged_config({"prompts": {"source": str(answered_file), "select": None, "chunk_size": 3}})
    plan.validate_config(config, SCHEMA)
    jobs = plan.Plan(config)
    assert jobs.answers and jobs.problem_set is None  # a file of answers: no problem_set rule
    before = plan.chunk_params(jobs.chunks["chunk0000"])
    # a changed answer reruns its chunk, as a changed text does
    rows = [json.loads(line) for line in answered_file.read_text().splitlines()]
    rows[0]["answer"] = "5"
    answered_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    after = plan.chunk_params(plan.Plan(config).chunks["chunk0000"])
    assert after["ids"] == before["ids"] == ["p1", "p2", "p3"] and after["digest"] != before["digest"]
    # the default study's prompts have none
    default = merged_config()
    plan.validate_config(default, SCHEMA)
    assert not plan.Plan(default).answers


def test_the_plan_of_a_reasoning_gym_set():
    config = merged_config({"prompts": {"source": "reasoning-gym", "problems": TINY_SET, "select": [3, 1],
                                        "chunk_size": 2}})
    plan.validate_config(config, SCHEMA)
    assert config["prompts"]["problems"] == {**TINY_SET, "shots": 0, "extract": "first-number",
                                             "check": "reasoning-gym"}  # the schema's defaults
    jobs = plan.Plan(config)
    lines = answers_plan.problem_set_lines(TINY_SET)
    assert jobs.answers and jobs.problem_set == lines[0]["problem_set"]
    assert [(i, text) for i, text, _ in jobs.chunks["chunk0000"]] == [(3, lines[3]["prompt"]), (1, lines[1]["prompt"])]
    assert plan.local_source("reasoning-gym") is None


@pytest.mark.parametrize("prompts, message", [
    ({"source": "reasoning-gym"}, "invalid config: prompts.problems: required with prompts.source: reasoning-gym"),
    ({"source": "reasoning-gym", "problems": {**TINY_SET, "task": "no_such_task"}},
     "invalid config: prompts.problems: reasoning-gym refuses task 'no_such_task'"),
    ({"source": "reasoning-gym", "problems": {**TINY_SET, "settings": {"digits": 3}}},
     "unexpected keyword argument 'digits'"),
    ({"source": "reasoning-gym", "problems": {**TINY_SET, "extract": "last-word"}},
     "invalid config: prompts.problems.extract: 'last-word' is not one of"),
    ({"source": "reasoning-gym", "problems": TINY_SET, "select": [4]},
     "invalid config: prompts.select: indices [4] are out of range (the problem set has 4 problems)"),
    ({"problems": TINY_SET}, "invalid config: prompts.problems: read only with prompts.source: reasoning-gym"),
])
def test_a_bad_problem_set_is_one_config_error(prompts, message):
    config = merged_config({"prompts": {"select": None, **prompts}})
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(config, SCHEMA)
        plan.Plan(config)
    assert message in str(error.value)


# ------------------------------------------------------------------------------------------
# config/answers.yaml and config/answers-gpu.yaml
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["answers.yaml", "answers-gpu.yaml"])
def test_the_answers_configs_are_valid_and_plan_the_accuracy_study(name):
    config = merged_config(ROOT / "config" / name)
    plan.validate_config(config, SCHEMA)
    jobs = plan.Plan(config)
    assert jobs.answers and jobs.problem_set
    max_new = config["sampling"]["max_new_tokens"]
    assert max(config["correlation"]["decision_tokens"]) < max_new  # every prefix is shorter than a response
    assert config["evaluation"]["judge"] is None


def test_the_cpu_answers_config_is_the_owners_problem_set_and_the_default_studys_methods():
    config = merged_config(ROOT / "config" / "answers.yaml")
    plan.validate_config(config, SCHEMA)
    problems = config["prompts"]["problems"]
    assert problems == {"task": "basic_arithmetic", "settings": ONE_DIGIT_ADDITIONS, "size": 48, "seed": 0,
                        "shots": 3, "extract": "first-number", "check": "reasoning-gym"}
    assert config["results_dir"] == "results/answers" and config["prompts"]["chunk_size"] == 48
    assert config["generators"]["smollm2"]["prompt_format"] == "plain" and config["sampling"]["max_new_tokens"] == 16
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["methods"]
    methods = yaml.safe_load((ROOT / "config" / "answers.yaml").read_text())["methods"]
    assert [entry["name"] for entry in methods] == [entry["name"] for entry in default] + ["consensus"]
    changed = [entry for entry, before in zip(methods, default) if entry != before]
    assert changed == [{"name": "deepconf", "grid": {"n": [32], "window": [4]}, "rewards": ["logprob"]}]  # its window
    assert methods[-1] == {"name": "consensus", "grid": {"n": [16, 32], "wave": [4, 8]}, "rewards": ["logprob"]}
    assert [pair["reward"] for pair in config["pairs"]] == ["logprob", "self-certainty"]  # the reward-free pair too
    assert [line["answer"] for line in answers_plan.problem_set_lines(problems)] == [e["answer"] for e in entries(48, 0)]


@pytest.mark.parametrize("name, expected", [
    # 48 problems in one chunk, the default study's 2 pairs: 8 shards of Bo16 and SR's 3 alphas for
    # each; for the log-prob pair the control's 2, ST-BoN, DeepConf, Pandora and consensus at N = 16,
    # 32 x waves of 4, 8; the problem set written once, then the accuracy table, its figure and the
    # correctness prediction
    ("answers.yaml", {"problem_set": 1, "prepare_prompts": 1, "prompt_chunk": 1, "fetch_model": 1,
                      "reference_shard": 2 * 8, "method_run": 2 * 3 + 2 + 1 + 1 + 1 + 4, "score_prefixes": 2,
                      "accuracy_table": 1, "accuracy_figure": 1, "correctness": 1, "headline": 1}),
    # 200 problems in 4 chunks, one pair (its own log-prob), the default's 9 settings on each; the hub
    # model's fetch planned, not run
    ("answers-gpu.yaml", {"problem_set": 1, "prompt_chunk": 4, "fetch_model": 1, "reference_shard": 4 * 8,
                          "method_run": 4 * 9, "score_prefixes": 4, "accuracy_table": 1, "accuracy_figure": 1,
                          "correctness": 1}),
    # the default study: no answers, none of it
    (None, {"problem_set": None, "accuracy_table": None, "accuracy_figure": None, "correctness": None}),
])
def test_dry_run_plans_the_accuracy_study(tmp_path, name, expected):
    args = ["-n", "--cores", "2", "--quiet", "rules"] + (["--configfile", ROOT / "config" / name] if name else [])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # planning needs no network
    result = snakemake(*args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    counts = job_counts(result.stdout + result.stderr)
    assert {rule: counts.get(rule) for rule in expected} == expected


# ------------------------------------------------------------------------------------------
# the summary's accuracy section (analysis.summary_page)
# ------------------------------------------------------------------------------------------


def accuracy_rows():
    """An accuracy_summary of one pair: Bo16 and SR α=0.5 under the three rules, no FLOP counts."""
    import pandas as pd

    rows = []
    for label, n, reference, compute, accuracies in (("Bo16", 16, True, 1.0, (30.0, 35.0, 36.0)),
                                                     ("SR α=0.5", 128, False, 1.5, (37.5, 40.0, 41.0))):
        for rule, accuracy in zip(("reward", "vote", "weighted-vote"), accuracies, strict=True):
            rows.append({"pair": "SmolLM2 / logprob", "method": "bon" if reference else "sr", "method_label": label,
                         "n": n, "reference": reference, "rule": rule, "n_prompts": 48, "accuracy": accuracy,
                         "accuracy_lo": accuracy - 10, "accuracy_hi": accuracy + 10, "relative_compute": compute,
                         "relative_compute_lo": compute * 0.9, "relative_compute_hi": compute * 1.1,
                         "relative_flops": float("nan"), "relative_flops_lo": float("nan"),
                         "relative_flops_hi": float("nan"), "confidence_level": 0.95, "bootstrap_resamples": 1000})
    return pd.DataFrame(rows)


def test_the_accuracy_table_has_a_row_per_configuration_and_a_column_per_rule():
    from analysis.accuracy_page import accuracy_table

    table = accuracy_table(accuracy_rows())
    assert list(table.index) == ["Bo16", "SR α=0.5"] and table.index.name == "Method"
    assert list(table.columns) == ["reward's pick", "reward's pick lo", "reward's pick hi", "majority vote",
                                   "majority vote lo", "majority vote hi", "weighted vote", "weighted vote lo",
                                   "weighted vote hi", "compute (× Bo16)", "compute (× Bo16) lo",
                                   "compute (× Bo16) hi"]  # no FLOPs column without counts
    assert table.loc["SR α=0.5", "majority vote"] == 40.0 and table.loc["SR α=0.5", "compute (× Bo16) hi"] == pytest.approx(1.65)


def test_the_summary_has_an_accuracy_section_only_with_answers():
    from analysis.accuracy_page import accuracy_section
    from analysis.page import to_markdown

    page = to_markdown(accuracy_section(accuracy_rows()))
    assert "## Accuracy on the reference answers" in page and "### SmolLM2 / logprob" in page
    assert "40.0 [30.0, 50.0]" in page and "1.5 [1.4, 1.7]" in page
    assert "48 problems answered by every configuration" in page


# ------------------------------------------------------------------------------------------
# end to end: a small accuracy study on the tiny random generator
# ------------------------------------------------------------------------------------------

# the tiny configuration cut to the accuracy study: one pair, Bo2 and Bo4 (two shards of 2), SR at
# alpha 0.5, four one-digit additions with one solved example each, as plain text
TINY_ANSWERS = """
pairs: [{generator: tiny, reward: logprob}]
prompts:
  source: reasoning-gym
  problems: {task: basic_arithmetic, settings: %s, size: 4, seed: 0, shots: 1}
  select: null
  chunk_size: 4
methods:
  - {name: bon, grid: {n: [2, 4]}, shard_size: 2}
  - {name: sr, grid: {alpha: [0.5], batch_size: [8], min_tokens: [4], max_init_batch: [128]}, memory_budget: 5MB}
correlation: {pairs: null, n: 4, decision_tokens: [2, 4], alphas: [0.5], confidence_level: 0.95, n_resamples: 50}
tables: {table1_reward: logprob, table2_reward: logprob, improvement_normalization: bon_min_range,
         bootstrap_resamples: 50}
evaluation: {judge: null}
""" % json.dumps(ONE_DIGIT_ADDITIONS)


def _rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_a_tiny_accuracy_study_runs_to_its_tables_figure_and_summary(generator_dir, tmp_path):
    generator = f"generators:\n  tiny: {{model: {json.dumps(str(generator_dir))}, label: Tiny, prompt_format: plain}}\n"
    (tmp_path / "answers.yaml").write_text(generator + TINY_ANSWERS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    args = ["--cores", "2", "--configfile", TESTS / "workflow" / "config.yaml", "answers.yaml"]
    result = snakemake(*args, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    results = tmp_path / "results"

    # the problems, their answers reasoning-gym's, through the prompts file into every record
    own = entries(4, 0)
    problems = [json.loads(line) for line in (results / "prompts/problems.jsonl").read_text().splitlines()]
    assert [p["answer"] for p in problems] == [e["answer"] for e in own]
    prompts = [json.loads(line) for line in (results / "prompts/prompts.jsonl").read_text().splitlines()]
    assert [(p["answer"], p["check"], p["entry"]) for p in prompts] == [(e["answer"], "reasoning-gym", e) for e in own]
    shard = [json.loads(line) for line in (results / "runs/tiny--logprob/bon/shard0/chunk0000.jsonl")
             .read_text().splitlines()]
    assert [r["reference"]["answer"] for r in shard] == [e["answer"] for e in own]
    assert all("correct" in c for r in shard for c in r["candidates"] if c["complete"])

    # accuracy per configuration and rule, on the 4 problems
    summary = _rows(results / "metrics/accuracy.csv")
    assert {(row["method_label"], row["rule"]) for row in summary} == {
        (label, rule) for label in ("Bo2", "Bo4", "SR α=0.5") for rule in ("reward", "vote", "weighted-vote")}
    assert {row["n_prompts"] for row in summary} == {"4"} and {row["pair"] for row in summary} == {"Tiny / logprob"}
    assert all(0 <= float(row["accuracy"]) <= 100 for row in summary)
    ladder = _rows(results / "metrics/accuracy_ladder.csv")
    assert {(row["k"], row["ladder_label"]) for row in ladder} >= {("1", "SC@1"), ("2", "BoN@2"), ("4", "SC@4")}
    assert all(float(row["pass_at_k"]) >= float(row["accuracy"]) for row in ladder)  # the ceiling
    table = _rows(results / "tables/accuracy.csv")
    assert [row["Method"] for row in table] == ["Bo2", "Bo4", "SR α=0.5"]
    assert "majority vote" in (results / "tables/accuracy.md").read_text()
    assert (results / "figures/accuracy_vs_compute.png").stat().st_size > 10_000
    assert (results / "figures/accuracy_vs_compute.pdf").exists()
    correctness = _rows(results / "correlation/correctness.csv")
    assert [(row["pair"], row["tau"], row["n_prompts"]) for row in correctness] == [
        ("Tiny / logprob", "2", "4"), ("Tiny / logprob", "4", "4")]
    assert "## Accuracy on the reference answers" in (results / "summary.md").read_text()

    # nothing left to do; another seed draws other problems: the set is written again, and once the
    # prompts file holds them the chunks (their digests changed) and all that depends on them rerun.
    # (Snakemake checks no params of a job below one that reruns when its input is ancient, as the
    # chunks' prompts file is: in one run the chunks' digests are not compared yet.)
    assert "Nothing to be done" in snakemake(*args, "-n", cwd=tmp_path, env=env).stdout
    (tmp_path / "seed.yaml").write_text("prompts: {problems: {seed: 1}}\n")
    counts = job_counts(snakemake(*args, "seed.yaml", "-n", "--quiet", "rules", cwd=tmp_path, env=env).stdout)
    assert {rule: counts.get(rule) for rule in ("problem_set", "prepare_prompts")} == \
        {"problem_set": 1, "prepare_prompts": 1}
    assert snakemake(*args, "seed.yaml", "--", "results/prompts/prompts.jsonl", cwd=tmp_path, env=env).returncode == 0
    counts = job_counts(snakemake(*args, "seed.yaml", "-n", "--quiet", "rules", cwd=tmp_path, env=env).stdout)
    assert {rule: counts.get(rule) for rule in ("problem_set", "prompt_chunk", "reference_shard", "method_run",
                                                "accuracy_table")} == {
        "problem_set": None, "prompt_chunk": 1, "reference_shard": 2, "method_run": 1, "accuracy_table": 1}

    # the report holds the accuracy table, its figure and the correctness prediction, with their captions
    report = snakemake(*args, "--report", tmp_path / "report.zip", cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    import zipfile

    names = "\n".join(zipfile.ZipFile(tmp_path / "report.zip").namelist())
    for name in ("accuracy.csv", "accuracy_vs_compute.png", "correctness.csv"):
        assert name in names
