"""workflow/plan.py, job_options.py and messages.py without a workflow run: config checks, prompt
chunks, method settings, the engine's options per job, resources and the messages after a run,
on a small hand-written config (expected values worked out by hand from config/README.md and the
rules, not recomputed with the code under test)."""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
sys.path.insert(0, str(ROOT / "workflow"))
import job_options  # noqa: E402
import messages  # noqa: E402
import plan  # noqa: E402

pytest.importorskip("jsonschema")

PROMPTS = [{"prompt_id": "a", "prompt": "x"}, {"prompt_id": "b", "prompt": "y"},
           {"prompt_id": "c", "prompt": "z"}, {"prompt_id": "d", "prompt": "w"}]


@pytest.fixture
def raw_config(tmp_path):
    """Two pairs (a reward model with remote code, and logprob), Bo-N in shards of 4, adaptive SR
    fit on held-out rows 2 and 3."""
    source = tmp_path / "prompts.json"
    source.write_text(json.dumps(PROMPTS))
    return {
        "prompts": {"source": str(source), "select": [0, 1], "chunk_size": 1},
        "generators": {"g": {"model": "gen-model", "label": "G"}},
        "rewards": {"logprob": {"model": "logprob"},
                    "rm": {"model": "rm-model", "label": "RM", "trust_remote_code": True}},
        "pairs": [{"generator": "g", "reward": "rm"}, {"generator": "g", "reward": "logprob"}],
        "methods": [{"name": "bon", "grid": {"n": [8, 4, 2]}, "shard_size": 4},
                    {"name": "sr", "grid": {"alpha": [0.5, 0.25]}},
                    {"name": "sr-adaptive", "grid": {"delta": [0.2], "alpha": [0.5]}, "calibration_prompts": [2, 3]}],
    }


@pytest.fixture
def config(raw_config):
    plan.validate_config(raw_config, SCHEMA)
    return raw_config


# ------------------------------------------------------------------------------------------
# config validation
# ------------------------------------------------------------------------------------------


def test_validation_fills_the_schemas_defaults(config):
    assert config["sampling"] == {"max_new_tokens": 256, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 0}
    assert config["methods"][1] == {"name": "sr", "grid": {"alpha": [0.5, 0.25]}, "shard_size": None,
                                    "memory_budget": None, "calibration_prompts": None, "rewards": None}
    assert config["rewards"]["logprob"] == {"model": "logprob", "dtype": None, "trust_remote_code": False,
                                            "batch_size": 16}
    assert config["correlation"]["n"] == 32 and config["evaluation"]["judge"] is None
    assert config["resources"]["analysis"] == {"gpu": 0, "threads": 1, "mem_mb": 4000, "runtime": 60}
    assert (config["device"], config["dtype"], config["memory_budget"]) == ("auto", "auto", None)
    assert config["results_dir"] == "results" and config["generators"]["g"]["prompt_format"] == "auto"


def test_results_dir_is_named_once_whatever_its_spelling(raw_config):
    raw_config["results_dir"] = "./results/grid/"
    plan.validate_config(raw_config, SCHEMA)
    assert raw_config["results_dir"] == "results/grid"
    assert plan.merged_runs(raw_config, raw_config["results_dir"], ["g--rm"])[0] == \
        "results/grid/runs/g--rm/bon/n2.jsonl"


@pytest.mark.parametrize("change, message", [
    (lambda c: c["methods"][0].update(shard_size="x"),
     "invalid config: methods[0].shard_size: 'x' is not of type 'integer', 'null'"),
    (lambda c: c.update(dtype="float16"), "invalid config: dtype: 'float16' is not one of 'auto', 'float32', "
                                          "'bfloat16'"),
    (lambda c: c["methods"][0].update(memory_budget="lots"),
     "invalid config: methods[0].memory_budget: 'lots' is not valid: expected a memory size such as 64MiB or 2GiB, "
     "or null for the engine's default"),
    (lambda c: c["methods"][1].update(alphas=[0.5]),
     "invalid config: methods[1]: Additional properties are not allowed ('alphas' was unexpected) (allowed keys: "
     "calibration_prompts, grid, memory_budget, name, rewards, shard_size)"),
    (lambda c: c.pop("pairs"), "invalid config: (top level): 'pairs' is a required property"),
    (lambda c: c.update(results_dir="my results"),
     "invalid config: results_dir: 'my results' is not valid: expected a folder without whitespace"),
    (lambda c: c["generators"]["g"].update(prompt_format="template"),
     "invalid config: generators.g.prompt_format: 'template' is not one of 'auto', 'chat', 'plain'"),
])
def test_schema_problems_are_one_line_naming_the_key(raw_config, change, message):
    change(raw_config)
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(raw_config, SCHEMA)
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.parametrize("change, message", [
    (lambda c: c["pairs"].append({"generator": "h", "reward": "rm"}),
     "pairs[2].generator: 'h' is not defined under generators (defined: g)"),
    (lambda c: c["pairs"].append({"generator": "g", "reward": "rm"}), "pairs: a generator/reward pair is listed twice"),
    (lambda c: c["methods"][0]["grid"].update(n=[4, 6, 12]),
     "methods[0].grid.n: 6 above shard_size=4 must be multiples of it"),
    (lambda c: c.update(correlation={"n": 10}), "correlation.n: 10 must be a multiple of the reference's shard_size=4"),
    (lambda c: c.update(figures={"figure2": {"pair": "g--x"}}), "figures.figure2.pair: 'g--x' is not a pair "
                                                                "(pairs: g--rm, g--logprob)"),
    (lambda c: c.update(tables={"table1_reward": "nope"}), "tables.table1_reward: 'nope' is not defined under rewards"),
    (lambda c: c["methods"][2].update(calibration_prompts=[1, 2]),
     "methods[2].calibration_prompts: 1 are also in prompts.select: the fit must come from held-out prompts"),
    (lambda c: c["prompts"].update(source="missing.json"), "prompts.source: file not found: missing.json"),
    (lambda c: c.update(calibration={"samplers": ["plain"]}, sampling={"top_k": 50}),
     "calibration.samplers: every step of this sampling (top_k 50, top_p 1.0, temperature 1.0) is 'filtered', "
     "not measured (listed: plain)"),
    (lambda c: c["prompts"].update(source="org/dataset", select=None),
     "prompts.source 'org/dataset' is a Hugging Face dataset: give prompts.select"),
])
def test_cross_checks_name_the_key(raw_config, tmp_path, change, message):
    change(raw_config)
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(raw_config, SCHEMA, basedir=tmp_path)
    assert str(error.value).startswith("invalid config: ") and message in str(error.value), str(error.value)


TABLE_METHOD = """
from specrej.methods import Method, Param

TABLE = Method(name="table-method", description="a method that reads a table", run=None, label=lambda p: "T",
               params=(Param("table", "path", help="a table of scores"),))
"""


def write_table_method(folder, monkeypatch):
    """Write `table_method.py` into `folder`; a module of that name another test imported is forgotten,
    so this one is imported afresh."""
    (folder / "table_method.py").write_text(TABLE_METHOD)
    monkeypatch.delitem(sys.modules, "table_method", raising=False)


@pytest.mark.parametrize("change, message", [
    (lambda c, tmp: c.update(results_dir="notes.md"), "results_dir: notes.md is a file, not a folder"),
    (lambda c, tmp: c.update(results_dir="notes.md/grid"),
     "results_dir: notes.md is a file, not a folder (results_dir notes.md/grid lies under it)"),
    (lambda c, tmp: c["prompts"].update(source="prompt_folder"),
     "prompts.source: prompt_folder is a folder, not a .json, .jsonl or .txt file"),
    (lambda c, tmp: c["prompts"].update(source="prompt_folder/missing.jsonl"),
     "prompts.source: file not found: prompt_folder/missing.jsonl"),
    (lambda c, tmp: c["methods"].append({"name": "python:table_method:TABLE", "grid": {"table": ["no/table.csv"]}}),
     "methods[3].grid.table: file not found: no/table.csv"),
])
def test_paths_are_checked_at_planning_one_line_naming_the_key(raw_config, tmp_path, monkeypatch, change, message):
    (tmp_path / "notes.md").write_text("a file\n")
    (tmp_path / "prompt_folder").mkdir()
    write_table_method(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    change(raw_config, tmp_path)
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(raw_config, SCHEMA, basedir=tmp_path)
    assert str(error.value) == f"invalid config: {message}"


def test_a_file_parameter_that_exists_passes(raw_config, tmp_path, monkeypatch):
    write_table_method(tmp_path, monkeypatch)
    (tmp_path / "table.csv").write_text("score\n1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw_config["methods"].append({"name": "python:table_method:TABLE", "grid": {"table": ["table.csv"]}})
    raw_config.update(results_dir="fresh/results")  # a folder not made yet is fine
    plan.validate_config(raw_config, SCHEMA, basedir=tmp_path)


def test_key_path():
    assert plan.key_path(["pairs", 0, "generator"]) == "pairs[0].generator"
    assert plan.key_path(["methods", 0, "grid", "n", 1]) == "methods[0].grid.n[1]"
    assert plan.key_path([]) == ""


def test_local_source_is_found_in_the_working_directory_or_the_workflows(tmp_path, monkeypatch):
    (tmp_path / "in_workflow.jsonl").write_text("")
    monkeypatch.chdir(tmp_path.parent)
    assert plan.local_source("in_workflow.jsonl", basedir=tmp_path) == str(tmp_path / "in_workflow.jsonl")
    assert plan.local_source("not_yet_there.json", basedir=tmp_path) == "not_yet_there.json"  # a file by its suffix
    assert plan.local_source("tatsu-lab/alpaca_farm:alpaca_farm_evaluation", basedir=tmp_path) is None


# ------------------------------------------------------------------------------------------
# prompts and chunks
# ------------------------------------------------------------------------------------------


def test_plan_of_the_config(config):
    p = plan.Plan(config)
    assert list(p.pairs) == ["g--rm", "g--logprob"]
    assert p.chunks == {"a": [("a", "x")], "b": [("b", "y")]}  # one prompt per chunk: named by its id
    assert p.calibration_chunks == {"calibration0000": [("c", "z")], "calibration0001": [("d", "w")]}
    assert list(p.all_chunks) == ["a", "b", "calibration0000", "calibration0001"]
    assert p.adaptive_deltas == [0.2] and p.correlation_pairs == ["g--rm", "g--logprob"]
    assert p.table1_pairs == ["g--rm"]  # table1_reward null: the first pair's reward
    assert p.table2_pairs == ["g--logprob"]  # table2_reward's default, logprob
    assert p.figure2_pair == "g--rm"
    assert p.figure4_pairs == ["g--rm", "g--logprob"]  # figure4.pair null: every studied pair, a row each


def test_figure4_shows_the_pair_named_or_every_studied_pair(config):
    config["figures"]["figure4"]["pair"] = "g--logprob"
    assert plan.Plan(config).figure4_pairs == ["g--logprob"]
    config["figures"]["figure4"]["pair"] = None
    config["correlation"]["pairs"] = ["g--logprob"]
    assert plan.Plan(config).figure4_pairs == ["g--logprob"]
    assert plan.prepared_select(config) == [0, 1, 2, 3]


def test_select_out_of_range_is_a_config_error(config):
    config["prompts"]["select"] = [0, 7]
    with pytest.raises(plan.ConfigError, match=r"prompts.select: indices \[7\] are out of range .* has 4 prompts"):
        plan.plan_prompts(config)


def test_dataset_prompts_are_planned_by_row_index(config):
    config["prompts"].update(source="org/dataset", select=[5, 3])
    assert plan.plan_prompts(config) == [(5, None), (3, None)]


def test_plan_chunks():
    prompts = [("a", "x"), ("b", "y"), ("c", "z")]
    assert plan.plan_chunks(prompts, 2) == {"chunk0000": [("a", "x"), ("b", "y")], "chunk0001": [("c", "z")]}
    assert plan.plan_chunks(prompts, 1) == {"a": [("a", "x")], "b": [("b", "y")], "c": [("c", "z")]}
    assert list(plan.plan_chunks(prompts, 1, "calibration")) == ["calibration0000", "calibration0001",
                                                                 "calibration0002"]
    assert list(plan.plan_chunks([("q/1", "x"), ("what's up?", "y")], 1)) == ["q_1", "what_s_up_"]
    # ids that collide once made file-safe ("a/b" and "a?b" both give "a_b"): numbered instead
    assert list(plan.plan_chunks([("a/b", "x"), ("a?b", "y")], 1)) == ["chunk0000", "chunk0001"]


def test_chunk_params_digest_is_pinned():
    # the digest is in every generation job's params: a change here reruns every job
    params = plan.chunk_params([("a", "x"), (7, None)])
    assert params["ids"] == ["a", 7]
    assert params["digest"] == hashlib.sha256(b'[["a", "x"], ["7", null]]').hexdigest()[:16] == "62866a31c1e6b9ef"


# ------------------------------------------------------------------------------------------
# runs, sources of Bo-N, labels
# ------------------------------------------------------------------------------------------


def test_bon_sources(config):
    assert plan.reference_sources(config, 2) == ("direct", 2)
    assert plan.reference_sources(config, 4) == ("shards", 1)
    assert plan.reference_sources(config, 8) == ("shards", 2)
    config["methods"][0]["shard_size"] = None
    assert plan.reference_sources(config, 8) == ("direct", 8)


def test_merged_runs_in_order(config):
    assert plan.merged_runs(config, "results", ["g--rm"]) == [
        "results/runs/g--rm/bon/n2.jsonl", "results/runs/g--rm/bon/n4.jsonl", "results/runs/g--rm/bon/n8.jsonl",
        "results/runs/g--rm/sr/alpha0.5.jsonl", "results/runs/g--rm/sr/alpha0.25.jsonl",
        "results/runs/g--rm/sr/delta0.2.jsonl"]  # the reference's ladder by N, the rest in the config's order
    # every pair's runs of the other entries, then every pair's runs of the entry fitting on held-out prompts
    assert plan.merged_runs(config, "results", ["g--rm", "g--logprob"])[6:] == [
        "results/runs/g--rm/sr/alpha0.5.jsonl", "results/runs/g--rm/sr/alpha0.25.jsonl",
        "results/runs/g--logprob/sr/alpha0.5.jsonl", "results/runs/g--logprob/sr/alpha0.25.jsonl",
        "results/runs/g--rm/sr/delta0.2.jsonl", "results/runs/g--logprob/sr/delta0.2.jsonl"]


def test_labels(config):
    assert plan.pair_labels(config, config["pairs"][0]) == {"generator": "G", "reward": "RM", "pair": "G / RM"}
    assert plan.pair_labels(config, config["pairs"][1])["pair"] == "G / logprob"  # no label: the key


# ------------------------------------------------------------------------------------------
# the engine's options
# ------------------------------------------------------------------------------------------


def test_bon_args_shard(config):
    # shard 1: seed 0 + 1; no batch size or budget configured; the reward model alone needs remote code
    assert job_options.reference_args(config, config["pairs"][0], n=4, seed_offset=1) == (
        "--model gen-model --reward rm-model --method bon --max-new-tokens 256 --temperature 1.0 --top-p 1.0 "
        "--top-k 0 --seed 1 --device auto --dtype auto --reward-batch-size 16 --no-progress --exit-zero --n 4 "
        "--trust-remote-code reward")


def test_method_args_adaptive_sr(config):
    """Adaptive SR is a method_run setting: its entry's grid (a schedule of its own, its delta and
    fallback alpha), the pair's held-out fit (added per pair by common.smk's method_run_args) and
    its entry's memory budget over the top-level one."""
    config["methods"][2]["grid"].update(batch_size=[64], decision_tokens=[[8, 16]])
    config["methods"][2]["memory_budget"] = "64MiB"
    config["memory_budget"] = "27MiB"
    run = plan.method_settings(config)[("sr", "delta0.2")]
    assert run == {"spec": "sr-adaptive", "params": {"delta": 0.2, "alpha": 0.5, "batch_size": 64,
                                                     "decision_tokens": [8, 16]},
                   "fit_param": "fit", "memory_budget": "64MiB", "rewards": None}
    fit = plan.calibration_fit_file("results", "g--logprob")
    assert job_options.method_args(config, config["pairs"][1], run["spec"], {**run["params"], "fit": fit},
                                   run["memory_budget"]) == (
        "--model gen-model --reward logprob --method sr-adaptive --max-new-tokens 256 --temperature 1.0 --top-p 1.0 "
        "--top-k 0 --seed 0 --device auto --dtype auto --reward-batch-size 16 --no-progress --exit-zero "
        "--param delta=0.2 --param alpha=0.5 --param batch_size=64 --param decision_tokens=8,16 "
        "--param fit=results/adaptive/g--logprob/calibration_prefixes.parquet --memory-budget 64MiB")
    config["methods"][2]["calibration_prompts"] = None  # the online fit: no fit file
    assert plan.method_settings(config)[("sr", "delta0.2")]["fit_param"] is None


def test_bon_args_batch_is_capped_at_n_and_budgets_override(config):
    config["methods"][0]["grid"]["batch_size"] = [16]
    config["methods"][0]["memory_budget"] = "1GiB"
    config["memory_budget"] = "27MiB"
    config["generators"]["g"]["dtype"] = "bfloat16"
    config["sampling"]["temperature"] = 0.7
    args = job_options.reference_args(config, config["pairs"][1], n=4)
    assert args.endswith("--n 4 --param batch_size=4 --memory-budget 1GiB")
    assert "--temperature 0.7 " in args and "--dtype bfloat16 " in args
    assert job_options.method_args(config, config["pairs"][1], "sr", {"alpha": 0.5}).endswith(
        "--param alpha=0.5 --memory-budget 27MiB")  # the reference's budget is its own


def test_engine_args_pass_a_prompt_format_other_than_auto(config):
    auto = job_options.reference_args(config, config["pairs"][1], n=2)
    assert "--prompt-format" not in auto  # the CLI's default: the jobs' options are as before the key existed
    config["generators"]["g"]["prompt_format"] = "plain"
    assert job_options.reference_args(config, config["pairs"][1], n=2) == (
        "--model gen-model --reward logprob --method bon --prompt-format plain --max-new-tokens 256 "
        "--temperature 1.0 --top-p 1.0 --top-k 0 --seed 0 --device auto --dtype auto --reward-batch-size 16 "
        "--no-progress --exit-zero --n 2")
    assert job_options.method_args(config, config["pairs"][1], "sr-random", {"alpha": 0.5}).startswith(
        "--model gen-model --reward logprob --method sr-random --prompt-format plain --max-new-tokens 256 ")
    # score-prefixes reads the recorded tokens and log-probs, and a reward model renders the prompt
    # with its own template: the generator's prompt format plays no part there
    assert "--prompt-format" not in job_options.prefix_args(config, config["pairs"][0])


def test_engine_args_pass_a_compile_setting_other_than_auto_and_yaml_bare_words(config):
    assert config["generators"]["g"]["compile"] == "auto"
    assert "--compile" not in job_options.reference_args(config, config["pairs"][1], n=2)  # the CLI's default
    for setting, passed in (("on", "on"), (True, "on"), ("off", "off"), (False, "off")):  # YAML: on -> true
        config["generators"]["g"]["compile"] = setting
        assert f"--method bon --compile {passed} --max-new-tokens" in job_options.reference_args(config, config["pairs"][1], n=2)


def test_a_generator_under_compile_auto_builds_its_graphs_once_per_model_and_dtype(config):
    """The compiled_graphs job: under compile auto with build_graphs (the defaults), not under on or
    off, not with build_graphs false or a generator's own code; one per model and dtype."""
    assert config["generators"]["g"]["build_graphs"] is True and job_options.builds_graphs(config, "g")
    assert job_options.compile_args(config, "g", 16) == ("--model gen-model --dtype auto --device auto --rows 16 "
                                                         "--tokens 8 --repeats 2 --if-missing")
    config["generators"]["same"] = {**config["generators"]["g"], "label": "same model"}
    config["generators"]["bf16"] = {**config["generators"]["g"], "dtype": "bfloat16"}
    assert job_options.graphs_name(config, "same") == job_options.graphs_name(config, "g")
    assert job_options.graphs_name(config, "bf16") == job_options.graphs_name(config, "g").replace("--auto", "--bfloat16")
    for key, value in (("compile", "on"), ("compile", False), ("build_graphs", False), ("trust_remote_code", True)):
        config["generators"]["g"] = {**config["generators"]["same"], key: value}
        assert not job_options.builds_graphs(config, "g")


def test_a_job_waits_on_the_graphs_of_the_row_ranges_its_batch_uses():
    """One compiled_graphs job per row range of the step (specrej.engine.compiled): a Best-of-16 job
    runs on 1 to 16 rows (finished rows leave), so it waits on the 1-row and 2-64 ranges; 65 rows on
    all three; a job whose largest batch is not known before it runs, on all three."""
    from specrej.engine.compiled import ALL_RANGES, row_range

    assert {row_range(rows) for rows in job_options.GRAPH_ROWS.values()} == set(ALL_RANGES)
    assert all(row_range(rows) == name for name, rows in job_options.GRAPH_ROWS.items())
    assert job_options.graph_rows(16) == [1, 16] and job_options.graph_rows(1) == [1]
    assert job_options.graph_rows(64) == [1, 16] and job_options.graph_rows(65) == [1, 16, 128]
    assert job_options.graph_rows(None) == [1, 16, 128]


def test_a_pairs_calibration_measures_its_generator_as_the_runs_use_it_and_its_rewards_scoring(config):
    """The calibrate job: the generator's dtype, device and compile setting, the pair's reward (not a
    reward model that runs its own code), the config's grid, once per machine."""
    config["calibration"] = {"rows": [1, 16, 128], "contexts": [64, 192], "steps": 4, "min_seconds": 0.25, "repeats": 3,
                             "samplers": None}
    pair = config["pairs"][1]
    reward = config["rewards"][pair["reward"]]
    args = job_options.calibrate_args(config, pair)
    assert args == (f"--model gen-model --dtype auto --device auto --compile auto --reward {reward['model']} "
                    "--rows 1,16,128 --contexts 64,192 --steps 4 --min-seconds 0.25 --repeats 3 --if-missing")
    config["calibration"]["samplers"] = ["plain", "plain+top-logprobs"]  # the study's variants only
    assert job_options.calibrate_args(config, pair).endswith("--repeats 3 --samplers plain,plain+top-logprobs --if-missing")
    config["rewards"][pair["reward"]] = {**reward, "trust_remote_code": True}
    assert "--reward" not in job_options.calibrate_args(config, pair)
    from specrej.cli.parser import build_parser  # the CLI takes every option it is given
    build_parser().parse_args(["calibrate", *shlex.split(args), "--threads", "1", "--out", "x.json"])


def test_engine_args_trust_each_model_alone_and_pin_its_revision(config):
    """A trusted reward model gives --trust-remote-code reward (its generator runs no code of its
    own), a trusted generator model, both both; a `revision` becomes --model-revision /
    --reward-revision beside its model, and a config without one keeps its options."""
    rm, logprob = config["pairs"]
    assert job_options.reference_args(config, rm, n=2).endswith(" --n 2 --trust-remote-code reward")
    assert "--trust-remote-code" not in job_options.reference_args(config, logprob, n=2)
    config["generators"]["g"]["trust_remote_code"] = True
    assert job_options.reference_args(config, rm, n=2).endswith(" --n 2 --trust-remote-code both")
    assert job_options.reference_args(config, logprob, n=2).endswith(" --n 2 --trust-remote-code model")
    assert job_options.prefix_args(config, logprob)[-1] == "--no-progress"  # logprob loads no tokenizer
    assert "--model-revision" not in job_options.reference_args(config, rm, n=2)
    config["generators"]["g"]["revision"] = "v1.0"
    config["rewards"]["rm"]["revision"] = "0123abcd"
    plan.validate_config(config, SCHEMA)
    assert job_options.method_args(config, rm, "sr", {"alpha": 0.5}).startswith(
        "--model gen-model --model-revision v1.0 --reward rm-model --reward-revision 0123abcd --method sr ")
    assert job_options.prefix_args(config, rm) == [
        "--reward", "rm-model", "--reward-revision", "0123abcd", "--decision-tokens", "16,32,64,128", "--device",
        "auto", "--dtype", "auto", "--reward-batch-size", "16", "--no-progress", "--model", "gen-model",
        "--model-revision", "v1.0", "--trust-remote-code", "both"]


def test_the_compiled_study_config_is_the_default_study_with_its_step_compiled():
    """config/compiled.yaml merged over config/config.yaml as Snakemake merges a --configfile."""
    import yaml
    from snakemake.utils import update_config

    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    merged = copy.deepcopy(default)
    update_config(merged, yaml.safe_load((ROOT / "config" / "compiled.yaml").read_text()))
    plan.validate_config(merged, SCHEMA)
    plan.validate_config(default, SCHEMA)
    assert merged["results_dir"] == "results/compiled" and default["results_dir"] == "results"
    pair = merged["pairs"][0]
    assert "--compile on" in job_options.reference_args(merged, pair, n=16)
    assert "--compile" not in job_options.reference_args(default, pair, n=16)
    assert job_options.reference_args(merged, pair, n=16).replace(" --compile on", "") == \
        job_options.reference_args(default, pair, n=16)
    merged["generators"]["smollm2"].pop("compile")
    default["generators"]["smollm2"].pop("compile")
    assert {k: v for k, v in merged.items() if k != "results_dir"} == {k: v for k, v in default.items() if k != "results_dir"}


def test_engine_args_are_quoted_for_the_shell(config):
    config["generators"]["g"]["model"] = "/models/my model"
    args = job_options.reference_args(config, config["pairs"][1], n=2)
    assert args.startswith("--model '/models/my model' --reward logprob ")
    assert shlex.split(args)[1] == "/models/my model"


def test_engine_options_parse_with_the_engines_own_parser(config):
    """The options the plan builds are the CLI's: specrej.cli.main's parser accepts every one."""
    from specrej.cli.main import build_parser

    parser = build_parser()
    config["methods"][0]["grid"]["batch_size"] = [16]
    config["methods"][1]["grid"]["decision_tokens"] = [[8]]
    config["methods"][1]["memory_budget"] = "64MiB"
    config["generators"]["g"]["prompt_format"] = "chat"
    jobs = [job_options.reference_args(config, pair, n=8, seed_offset=2) for pair in config["pairs"]] + [
        job_options.method_args(config, pair, run["spec"], run["params"], run["memory_budget"])
        for pair in config["pairs"] for run in plan.method_settings(config).values()]
    for args in jobs:
        parsed = parser.parse_args(["generate", *shlex.split(args), "--prompts", "p.jsonl", "--out", "o.jsonl"])
        assert parsed.model == "gen-model" and parsed.exit_zero and parsed.no_progress
        assert parsed.prompt_format == "chat"
    for pair in config["pairs"]:
        parsed = parser.parse_args(["score-prefixes", "--trajectories", "t.jsonl", "--out", "o.parquet",
                                    *job_options.prefix_args(config, pair)])
        assert parsed.decision_tokens == [16, 32, 64, 128]


def test_prefix_args(config):
    assert job_options.prefix_args(config, config["pairs"][1]) == [  # logprob: the generator scores itself
        "--reward", "logprob", "--decision-tokens", "16,32,64,128", "--device", "auto", "--dtype", "auto",
        "--reward-batch-size", "16", "--no-progress"]
    config["correlation"]["decision_tokens"] = [32, 8]
    config["rewards"]["rm"]["dtype"] = "float32"
    assert job_options.prefix_args(config, config["pairs"][0]) == [
        "--reward", "rm-model", "--decision-tokens", "8,32", "--device", "auto", "--dtype", "float32",
        "--reward-batch-size", "16", "--no-progress", "--model", "gen-model", "--trust-remote-code", "reward"]


def test_partial_path_is_named_by_the_options_and_the_prompts():
    args, prompts_digest = "--n 4", "0123456789abcdef"
    digest = hashlib.sha256(b"--n 4 0123456789abcdef").hexdigest()[:12]
    assert job_options.partial_path("results", "results/runs/p/bon/shard0/c.jsonl", args, prompts_digest) == \
        f"results/.partial/runs/p/bon/shard0/c.jsonl.{digest}.jsonl"
    # an edited prompt of the chunk (another digest) or other options: another file, never resumed
    assert job_options.partial_path("results", "results/runs/p/bon/shard0/c.jsonl", args, "fedcba9876543210") != \
        job_options.partial_path("results", "results/runs/p/bon/shard0/c.jsonl", args, prompts_digest)
    assert job_options.partial_path("results", "results/runs/p/bon/shard0/c.jsonl", "--n 8", prompts_digest) != \
        job_options.partial_path("results", "results/runs/p/bon/shard0/c.jsonl", args, prompts_digest)


# ------------------------------------------------------------------------------------------
# resources
# ------------------------------------------------------------------------------------------


def test_needs_gpu(config):
    config["resources"]["generate"]["gpu"] = 1
    config["resources"]["score_prefixes"]["gpu"] = 1
    assert job_options.needs_gpu(config, config["pairs"][1], "generate") == 1
    assert job_options.needs_gpu(config, config["pairs"][0], "score_prefixes") == 1
    assert job_options.needs_gpu(config, config["pairs"][1], "score_prefixes") == 0  # logprob prefix scores are free


@pytest.mark.parametrize("judge, key, local", [
    (None, None, False), ("longest", None, False), ("gpt4_turbo", None, False), ("local:default", None, True),
    ("auto", "sk-test", True), ("auto", None, True),  # auto is the local judge, key or not
])
def test_judge_resources(config, monkeypatch, judge, key, local):
    for variable in ("OPENAI_API_KEY", "OPENAI_API_KEYS", "OPENAI_CLIENT_CONFIG_PATH"):
        monkeypatch.delenv(variable, raising=False)
    if key:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    config["evaluation"]["judge"] = judge
    config["resources"]["evaluate"] = {"gpu": 1, "threads": 8, "mem_mb": 64000, "runtime": 240}
    config["resources"]["analysis"] = {"gpu": 3, "threads": 2, "mem_mb": 2000, "runtime": 10}
    assert plan.local_judge(config) is local
    expected = ({"gpu": 1, "threads": 8, "mem_mb": 64000, "runtime": 240} if local
                else {"gpu": 0, "threads": 2, "mem_mb": 2000, "runtime": 10})  # an analysis job never has a GPU
    assert job_options.judge_resources(config) == expected


# ------------------------------------------------------------------------------------------
# after a run
# ------------------------------------------------------------------------------------------


def test_messages_after_a_run(tmp_path):
    assert messages.failed_prompts_message(str(tmp_path)) is None and messages.out_of_range_messages(str(tmp_path)) == []
    (tmp_path / "failed_prompts.csv").write_text("run,prompt_id,error\nr1,empty,e\nr2,empty,e\nr2,zz,e\n")
    assert messages.failed_prompts_message(str(tmp_path)) == (
        f"specrej: 2 prompt(s) failed in 3 run(s) and are left out of the tables: empty, zz "
        f"(see {tmp_path / 'failed_prompts.csv'})")
    # a run that answered no prompt: named as a setting without a response, its prompts not as excluded
    (tmp_path / "failed_prompts.csv").write_text("run,prompt_id,method_label,run_answered,error\n"
                                                 "r1,empty,SR α=0.5,2,e\nr3,a,DeepConf N=32,0,e\nr3,b,DeepConf N=32,0,e\n")
    assert messages.failed_prompts_message(str(tmp_path)) == (
        f"specrej: 1 prompt(s) failed in 1 run(s) and are left out of the tables: empty "
        f"(see {tmp_path / 'failed_prompts.csv'})\n"
        f"specrej: 1 method setting run(s) completed no response on any prompt; the tables show them as such: "
        f"DeepConf N=32 (see {tmp_path / 'failed_prompts.csv'})")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "bon_equivalent.csv").write_text(
        "pair,method_label,improvement,bon_equivalent_status\n"
        "G / RM,SR α=0.5,97.25,interpolated\nG / RM,SR α=0.9,12.04,below_range\nG / RM,SR δ=0.2,101,above_range\n")
    where = tmp_path / "metrics" / "bon_equivalent.csv"
    assert messages.out_of_range_messages(str(tmp_path)) == [
        f"specrej: G / RM SR α=0.9 scores 12.0, below Bo-N_min: its BoN-equivalent compute is not interpolated "
        f"(see {where})",
        f"specrej: G / RM SR δ=0.2 scores 101.0, above the largest Best-of-N: its BoN-equivalent compute is not "
        f"interpolated (see {where})"]


def test_validation_leaves_a_valid_config_unchanged_on_a_second_pass(config):
    again = copy.deepcopy(config)
    plan.validate_config(again, SCHEMA)
    assert again == config


def test_study_models_one_fetch_job_per_distinct_model(config):
    config["generators"]["h"] = {"model": "/models/My Model.gguf", "label": "H"}
    config["pairs"].append({"generator": "h", "reward": "rm"})
    config["evaluation"]["judge"] = "local:default"
    models = plan.study_models(config)
    # gen-model, rm-model (once, though two pairs use it), the .gguf, the judge's; not logprob
    assert list(models.values()) == ["gen-model", "rm-model", "/models/My Model.gguf", "default"]
    digest = hashlib.sha256(b"/models/My Model.gguf").hexdigest()[:8]
    assert plan.model_name("/models/My Model.gguf") == f"My_Model.gguf-{digest}"
    assert plan.pair_models(config, config["pairs"][1]) == [plan.model_name("gen-model")]  # logprob: none
    assert plan.pair_models(config, config["pairs"][2]) == [plan.model_name("/models/My Model.gguf"),
                                                           plan.model_name("rm-model")]
    config["evaluation"]["judge"] = "longest"
    assert "default" not in plan.study_models(config).values()


def test_the_message_of_failed_jobs_says_how_to_resume(tmp_path, monkeypatch):
    """Jobs as report_failure (common.smk) reads them off Snakemake's scheduler: a job with
    wildcards and a log that ends in the engine's one-line error, one with two logs and none."""
    monkeypatch.chdir(tmp_path)
    jobs = [{"rule": "sr", "wildcards": "pair=g--rm, alpha=0.5, chunk=chunk0000",
             "logs": ["results/logs/sr/g--rm/alpha0.5/chunk0000.log"]},
            {"rule": "merge_reference", "wildcards": "", "logs": ["a.log", "b.log"]}]
    log = tmp_path / "results/logs/sr/g--rm/alpha0.5/chunk0000.log"
    log.parent.mkdir(parents=True)
    log.write_text("specrej generate ...\nspecrej: error: model path not found: /x\n\n")
    message = messages.failure_message(jobs, "make study").splitlines()
    assert message == [
        "specrej: 2 job(s) failed; finished jobs are kept:",
        "  sr (pair=g--rm, alpha=0.5, chunk=chunk0000): log results/logs/sr/g--rm/alpha0.5/chunk0000.log",
        "    last line: specrej: error: model path not found: /x",
        "  merge_reference: log a.log, b.log",
        "Fix the cause, then resume with the same command: make study",
    ]
    assert messages.resume_command(["/venv/bin/snakemake", "--cores", "2", "--configfile", "my config.yaml"], {}) == \
        "snakemake --cores 2 --configfile 'my config.yaml'"
    assert messages.resume_command(["snakemake"], {"SPECREJ_RESUME": "make study"}) == "make study"
    assert messages.failure_message([], "make study").startswith("specrej: the workflow stopped before any job failed")


def test_method_settings_in_the_entries_order_the_entry_fitting_on_held_out_prompts_last(config):
    config["methods"].insert(2, {"name": "sr-random", "grid": {"alpha": [0.7, 0.5], "min_tokens": [4]}})
    config["methods"][1]["grid"]["batch_size"] = [64]
    runs = plan.method_settings(config)
    assert list(runs) == [("sr", "alpha0.5"), ("sr", "alpha0.25"), ("sr-random", "alpha0.7"), ("sr-random", "alpha0.5"),
                          ("sr", "delta0.2")]  # adaptive SR's records say "sr": its run files sit beside SR's
    assert runs[("sr-random", "alpha0.7")] == {"spec": "sr-random", "params": {"alpha": 0.7, "min_tokens": 4},
                                               "fit_param": None, "memory_budget": None, "rewards": None}
    # no entry takes another's settings: SR's batch size is SR's alone
    assert runs[("sr", "alpha0.5")]["params"] == {"alpha": 0.5, "batch_size": 64}
    args = shlex.split(job_options.method_args(config, config["pairs"][1], "sr-random", {"alpha": 0.7, "min_tokens": 4}))
    assert args[args.index("--method") + 1] == "sr-random"
    params = [args[i + 1] for i, a in enumerate(args) if a == "--param"]
    assert params == ["alpha=0.7", "min_tokens=4"] and "--memory-budget" not in args
    from specrej.cli.main import build_parser

    parsed = build_parser().parse_args(["generate", *args, "--prompts", "p.json", "--out", "o.jsonl"])
    assert parsed.method == "sr-random" and parsed.param == params


def test_setting_names_keep_a_key_apart_from_its_value_when_the_key_ends_in_a_digit():
    from specrej.methods.base import Method, Param

    method = Method(name="cuts", description="two cuts", run=lambda session, params: {}, label=str,
                    params=tuple(Param(name, "int") for name in ("n", "k", "t1", "t2")),
                    setting_keys=("n", "k", "t1", "t2"))
    # t1=8 must not read as "t18"; n and k keep the form today's run files have
    assert method.setting_name({"n": 16, "k": 2, "t1": 8, "t2": 16}) == "n16-k2-t1_8-t2_16"


def test_grid_values_that_differ_past_six_digits_get_settings_of_their_own(config):
    """0.1234567 and 0.1234568 read alike in six digits (0.123457): each keeps its own run."""
    config["methods"] = [*config["methods"], {"name": "sr-random", "grid": {"alpha": [0.1234567, 0.1234568, 0.5]}}]
    names = [setting for directory, setting in plan.method_settings(config) if directory == "sr-random"]
    assert names == ["alpha0.1234567", "alpha0.1234568", "alpha0.5"]


@pytest.mark.parametrize("methods, message", [
    ([{"name": "beam"}], "methods[1].name: unknown method 'beam'"),
    ([{"name": "sr-random", "grid": {"alpha": [0.5, 1.5]}}], "methods[1].grid.alpha must be in [0, 1), got 1.5"),
    # a required parameter the grid leaves out: named by its config key, as every other problem
    ([{"name": "st-bon", "grid": {"n": [8]}}, {"name": "deepconf", "grid": {"eta": [0.1]}}],
     "invalid config: methods[2].grid.n is required for DeepConf"),
    # values valid alone that the method refuses together (DeepConf: n_init <= n)
    ([{"name": "deepconf", "grid": {"n": [8, 32], "n_init": [16]}}], "invalid config: methods[1].grid: "),
    ([{"name": "sr-random", "grid": {"beam": [2]}}],
     "methods[1].grid.beam: sr-random (random-halting SR, the control) takes no parameter 'beam'"),
    ([{"name": "sr-random"}, {"name": "sr-random"}], "methods[2].name: sr-random is listed twice"),
    ([{"name": "sr", "grid": {"alpha": [0.5]}, "shard_size": 4}],
     "methods[1].shard_size: only the reference method's entry has shards (sr is not the reference)"),
    ([{"name": "sr-random", "grid": {"alpha": [0.5]}, "calibration_prompts": [2]}],
     "methods[1].calibration_prompts: sr-random declares no single file parameter to take the held-out fit"),
    ([{"name": "bon", "grid": {"n": [4]}}], "methods: methods[0], methods[1] are each a reference method; keep one"),
])
def test_methods_entries_are_checked_against_their_declarations(raw_config, methods, message):
    raw_config["methods"] = raw_config["methods"][:1] + methods
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(raw_config, SCHEMA)
    assert message in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------
# the configs: each --configfile merged over config/config.yaml as Snakemake merges it
# ------------------------------------------------------------------------------------------


def merged_config(name: str) -> dict:
    """config/config.yaml with config/<name> merged over it (snakemake.utils.update_config, the
    function Snakemake's `--configfile` uses), validated."""
    import yaml

    update_config = pytest.importorskip("snakemake.utils").update_config
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((ROOT / "config" / name).read_text()))
    plan.validate_config(config, SCHEMA, ROOT)
    return config


def test_each_config_writes_its_own_results_dir():
    assert merged_config("config.yaml")["results_dir"] == "results"
    assert merged_config("adaptive.yaml")["results_dir"] == "results"  # it adds to the default study's
    assert merged_config("paper.yaml")["results_dir"] == "results/paper"
    assert merged_config("grid.yaml")["results_dir"] == "results/grid"


def test_grid_config_replaces_the_defaults_pairs_and_methods():
    config = merged_config("grid.yaml")
    jobs = plan.Plan(config, ROOT)
    assert list(jobs.pairs) == ["smollm2--logprob", "gemma3-270m--logprob"]
    assert jobs.correlation_pairs == jobs.figure4_pairs == jobs.table2_pairs == list(jobs.pairs)
    assert len(jobs.chunks) == 1 and len(next(iter(jobs.chunks.values()))) == 24  # the first 24 of the default study's prompts
    # Best-of-N and SR at the default's alphas only (the default's sr-random and ST-BoN are replaced)
    assert list(plan.method_settings(config)) == [("sr", "alpha0.5"), ("sr", "alpha0.7"), ("sr", "alpha0.9")]
    assert config["evaluation"]["judge"] is None and plan.judge_model_spec(config) is None
    assert list(plan.study_models(config).values()) == ["default", "gemma3-270m"]
    gemma = job_options.reference_args(config, jobs.pairs["gemma3-270m--logprob"], n=16)
    assert gemma.startswith("--model gemma3-270m --reward logprob --method bon --prompt-format plain "
                            "--max-new-tokens 64 ")
    assert "--dtype bfloat16 " in gemma and gemma.endswith("--n 16 --memory-budget 27MiB")
    smollm2 = job_options.method_args(config, jobs.pairs["smollm2--logprob"], "sr", {"alpha": 0.5})
    assert smollm2.startswith("--model default --reward logprob --method sr --prompt-format chat ")
    assert plan.merged_runs(config, config["results_dir"], ["gemma3-270m--logprob"])[0] == \
        "results/grid/runs/gemma3-270m--logprob/bon/n16.jsonl"


def test_paper_config_prompts_base_models_plainly_and_the_instruct_model_with_its_template():
    config = merged_config("paper.yaml")
    assert {name: g["prompt_format"] for name, g in config["generators"].items() if name != "smollm2"} == {
        "llama3-8b": "plain", "mistral-7b": "plain", "llama3-8b-instruct": "chat"}


# ------------------------------------------------------------------------------------------
# a method's code: what reruns its jobs when it changes
# ------------------------------------------------------------------------------------------


def test_method_code_is_its_modules_content_or_the_installed_version(tmp_path, monkeypatch):
    import importlib.metadata

    source = tmp_path / "edited_method.py"
    source.write_text("METHOD = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert job_options.method_source("python:edited_method:METHOD") == str(source)
    before = job_options.method_code("python:edited_method:METHOD")
    assert before == "sha256:" + hashlib.sha256(b"METHOD = None\n").hexdigest()
    source.write_text("METHOD = None  # edited\n")
    assert job_options.method_code("python:edited_method:METHOD") != before
    # a built-in method: no file of the user's; the package's version identifies its code
    assert job_options.method_source("sr-random") is None
    assert job_options.method_code("sr-random") == f"specrej {importlib.metadata.version('specrej')}"


def test_an_entrys_settings_are_its_own(config):
    """SR's batch size and memory budget are SR's entry's: random-halting SR runs SR's schedule only
    with the values its own entry gives, and DeepConf, whose batch_size is its own parameter, keeps
    its default and the device's budget (a user who sets SR's batch does not change DeepConf's)."""
    config["methods"][1]["grid"].update(batch_size=[64], min_tokens=[4])
    config["methods"][1]["memory_budget"] = "64MiB"
    config["methods"] += [{"name": "sr-random", "grid": {"alpha": [0.5]}}, {"name": "deepconf", "grid": {"n": [32]}}]
    config["memory_budget"] = "27MiB"
    runs = plan.method_settings(config)

    def options(key):
        run = runs[key]
        args = shlex.split(job_options.method_args(config, config["pairs"][1], run["spec"], run["params"],
                                                   run["memory_budget"]))
        return [args[i + 1] for i, a in enumerate(args) if a == "--param"], args[args.index("--memory-budget") + 1]

    assert options(("sr", "alpha0.5")) == (["alpha=0.5", "batch_size=64", "min_tokens=4"], "64MiB")
    assert options(("sr-random", "alpha0.5")) == (["alpha=0.5"], "27MiB")
    assert options(("deepconf", "n32-eta0.9")) == (["n=32"], "27MiB")


def test_the_retired_bon_and_sr_blocks_are_refused_with_the_entries_that_say_the_same(raw_config):
    raw_config.pop("methods")
    raw_config["bon"] = {"n": [16, 32], "shard_size": 16}
    raw_config["sr"] = {"alphas": [0.5], "min_tokens": 8, "max_init_batch": 128,
                        "adaptive": {"deltas": [0.05], "calibration_prompts": [2, 3]}}
    with pytest.raises(plan.ConfigError) as error:
        plan.validate_config(raw_config, SCHEMA)
    message = str(error.value)
    assert "\n" not in message and message.startswith("invalid config: bon: and sr: are no longer read")
    assert ("{name: bon, grid: {n: [16, 32]}, shard_size: 16}; "
            "{name: sr, grid: {alpha: [0.5], min_tokens: [8], max_init_batch: [128]}}; "
            "{name: sr-adaptive, grid: {delta: [0.05], alpha: [0.5], min_tokens: [8], max_init_batch: [128]}, "
            "calibration_prompts: [2, 3]}") in message
    # the entries it shows are a valid config that plans the same runs
    raw_config.pop("bon"), raw_config.pop("sr")
    raw_config["methods"] = [{"name": "bon", "grid": {"n": [16, 32]}, "shard_size": 16},
                             {"name": "sr", "grid": {"alpha": [0.5], "min_tokens": [8], "max_init_batch": [128]}},
                             {"name": "sr-adaptive", "grid": {"delta": [0.05], "alpha": [0.5], "min_tokens": [8],
                                                              "max_init_batch": [128]}, "calibration_prompts": [2, 3]}]
    plan.validate_config(raw_config, SCHEMA)
    assert list(plan.method_settings(raw_config)) == [("sr", "alpha0.5"), ("sr", "delta0.05")]


def test_resources_set_for_a_rule_the_workflow_lacks_are_named_with_the_new_name():
    rules = ["reference_shard", "method_run", "table1"]
    assert plan.unknown_rule_settings({"set-resources": ["reference_shard"], "set-threads": ["method_run"]},
                                      rules) is None
    assert plan.unknown_rule_settings({"set-resources": ["bon_shard", "tabel1"], "set-threads": []}, rules) == (
        "the profile or command line sets resources or threads for rules this workflow does not have: "
        "bon_shard (set-resources; now reference_shard), tabel1 (set-resources)")


def test_the_slurm_profile_sets_resources_only_for_rules_the_workflow_has():
    import yaml

    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    rule_names = {line.split()[1].rstrip(":") for path in (ROOT / "workflow" / "rules").glob("*.smk")
                  for line in path.read_text().splitlines() if line.startswith("rule ")}
    assert set(profile["set-resources"]) <= rule_names
    assert {"reference_shard", "method_run"} <= set(profile["set-resources"])
