# What only Snakemake can do: the globals the rules read, input functions and params of the
# wildcards, the wildcard constraints, the resources of each kind of job, and the hooks' reading
# of Snakemake's DAG and scheduler. The plain Python is workflow/plan.py (config checks, the
# jobs' dimensions), workflow/job_options.py (engine options, resources) and
# workflow/messages.py (what a run says).

import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
import answers_plan  # noqa: E402 (workflow/answers_plan.py)
import job_options  # noqa: E402 (workflow/job_options.py)
import messages  # noqa: E402 (workflow/messages.py)
import plan  # noqa: E402 (workflow/plan.py)


def validate_config(config, schema):
    """Validate `config` (filling the schema's defaults) and cross-check its references: any
    problem stops Snakemake before it plans a job, with one message that names the key."""
    try:
        plan.validate_config(config, Path(workflow.basedir) / schema, workflow.basedir)
    except plan.ConfigError as error:
        raise WorkflowError(str(error)) from None


def setup_plan(config):
    """The jobs' dimensions and the analysis jobs' resources, as globals for the rule files
    (after the config is validated); RESULTS, the folder every output goes to (`results_dir`)."""
    global PLAN, RESULTS, PAIRS, CHUNKS, CALIBRATION_CHUNKS, ALL_CHUNKS, ADAPTIVE_DELTAS, PROMPT_FILE, MODELS
    global CORRELATION_PAIRS, TABLE1_PAIRS, TABLE2_PAIRS, FIGURE2_PAIR, FIGURE4_PAIRS, ANALYSIS_RESOURCES
    global METHOD_RUNS, METHOD_DIRS, METHOD_SETTINGS, REFERENCE_DIR, ANSWERS, PROBLEM_SET
    try:
        PLAN = jobs = plan.Plan(config, workflow.basedir)
    except plan.ConfigError as error:
        raise WorkflowError(str(error)) from None
    RESULTS = config["results_dir"]  # normalised by validate_config: "results" unless the config names another
    PAIRS, CHUNKS, ALL_CHUNKS = jobs.pairs, jobs.chunks, jobs.all_chunks
    CALIBRATION_CHUNKS, ADAPTIVE_DELTAS = jobs.calibration_chunks, jobs.adaptive_deltas
    CORRELATION_PAIRS, TABLE1_PAIRS, TABLE2_PAIRS = jobs.correlation_pairs, jobs.table1_pairs, jobs.table2_pairs
    FIGURE2_PAIR, FIGURE4_PAIRS = jobs.figure2_pair, jobs.figure4_pairs
    MODELS = plan.study_models(config)  # {name: spec}: one fetch job each
    REFERENCE_DIR = jobs.reference["directory"]  # the reference's run files: runs/<pair>/<it>/n<N>.jsonl
    METHOD_RUNS = jobs.method_runs  # {(method, setting): {spec, params, fit_param, memory_budget}}: the method_run jobs
    METHOD_DIRS = "|".join(sorted({re.escape(m) for m, _ in METHOD_RUNS}))
    METHOD_SETTINGS = "|".join(sorted({re.escape(s) for _, s in METHOD_RUNS}))
    PROMPT_FILE = plan.local_source(config["prompts"]["source"], workflow.basedir)  # None: a dataset
    # the accuracy study (answers.smk): problems with reference answers, from a file or reasoning-gym,
    # whose problem set (PROBLEM_SET, its digest) rule problem_set writes as the prompts file
    ANSWERS, PROBLEM_SET = jobs.answers, jobs.problem_set
    if PROBLEM_SET:
        PROMPT_FILE = f"{RESULTS}/prompts/problems.jsonl"
    # merges, metrics, tables, figures: one thread (Snakemake's default), no GPU
    ANALYSIS_RESOURCES = {"gpu": 0, **{key: config["resources"]["analysis"][key] for key in ("mem_mb", "runtime")}}



def check_rule_settings():
    """Stop, with one line, when a profile or the command line sets resources or threads for a rule
    this workflow does not have (called once every rule is defined)."""
    settings = workflow.resource_settings
    message = plan.unknown_rule_settings({"set-resources": settings.overwrite_resources.keys(),
                                          "set-threads": settings.overwrite_threads.keys()},
                                         (rule.name for rule in workflow.rules))
    if message:
        raise WorkflowError(message)

wildcard_constraints:
    pair="[^/]+",
    chunk="[^/]+",
    n=r"\d+",
    k=r"\d+",
    study="correlation|adaptive",


# --------------------------------------------------------------------------------------
# resources: a GPU step's from config `resources.<step>`; analysis jobs: ANALYSIS_RESOURCES
# --------------------------------------------------------------------------------------


def step_resources(step):
    """resources of a `generate` or `score_prefixes` job: its GPUs (none for the free logprob
    prefix scores), mem_mb and runtime; its threads are the rule's `threads`."""
    return {
        "gpu": lambda wildcards: job_options.needs_gpu(config, PAIRS[wildcards.pair], step),
        "mem_mb": config["resources"][step]["mem_mb"],
        "runtime": config["resources"][step]["runtime"],
    }


def judge_resource(key):
    """The win-rate job's `key` (threads, gpu, mem_mb, runtime): resources.evaluate for a local
    model judge, else an analysis job's without a GPU (job_options.judge_resources)."""
    return job_options.judge_resources(config)[key]


# --------------------------------------------------------------------------------------
# pairs, chunks and the run files
# --------------------------------------------------------------------------------------


def chunk_params(chunk):
    """Prompt ids of a chunk and a digest of their texts: a changed prompt reruns its jobs."""
    return plan.chunk_params(ALL_CHUNKS[chunk])


def pair_labels(pair):
    """Display names: generator, reward, and 'generator / reward'."""
    return plan.pair_labels(config, PAIRS[pair])


def merged_runs(pairs=None):
    """The per-pair run files the metrics read: Bo-N for every N, then every method setting."""
    return plan.merged_runs(config, RESULTS, PAIRS if pairs is None else pairs)


def calibration_files(pairs=None):
    """Each pair's calibration, which eq. 7's modelled compute costs its records' steps on
    (figures.figure3.compute: modelled); none for another compute."""
    if config["figures"]["figure3"]["compute"] != "modelled":
        return []
    return [f"{RESULTS}/calibration/{pair}.json" for pair in (PAIRS if pairs is None else pairs)]


def all_local_cores():
    """Every core this run may use locally (--cores), so a job holding them runs alone; on a cluster
    without --cores, where each job has a node of its own, the generation jobs' threads."""
    try:
        cores = workflow.cores
    except Exception:  # snakemake's WorkflowError: no --cores given (a cluster profile)
        return config["resources"]["generate"]["threads"]
    return cores if cores < 1024 else config["resources"]["generate"]["threads"]


def merged_method_runs(pairs=None):
    """merged_runs() less the reference's ladder: the method settings' run files (a merged
    Best-of-N keeps only its best candidate; the accuracy study pools its shards instead)."""
    return plan.merged_method_runs(config, RESULTS, PAIRS if pairs is None else pairs)


def reference_pool(pair, n):
    """{shards, files}: the files that make Bo-n of `pair` with every candidate (shards
    0..n/shard_size-1 of each chunk, pooled per prompt; or a direct run's chunks)."""
    kind, count = plan.reference_sources(config, n)
    return {"shards": count if kind == "shards" else 1, "files": reference_files(pair, n, CHUNKS)}


def reference_ladder(pair):
    """{N: reference_pool(pair, N)} over the reference's ladder."""
    return {n: reference_pool(pair, n) for n in PLAN.reference["ladder"]}


def reference_ladder_files(pairs=None):
    """Every file of reference_ladder over `pairs` (default: every pair), each once."""
    return list(dict.fromkeys(path for pair in (PAIRS if pairs is None else pairs)
                              for rung in reference_ladder(pair).values() for path in rung["files"]))


def accuracy_outputs():
    """The accuracy study's tables, figure and correctness prediction ([] without reference answers)."""
    if not ANSWERS:
        return []
    return [*expand(f"{RESULTS}/tables/accuracy.{{ext}}", ext=["csv", "md"]),
            *expand(f"{RESULTS}/figures/accuracy_vs_compute.{{ext}}", ext=["png", "pdf"]),
            *([f"{RESULTS}/correlation/correctness.csv"] if CORRELATION_PAIRS else [])]


def accuracy_metrics(name):
    """[<results_dir>/metrics/<name>] of the accuracy study ([] without reference answers): the
    headline's accuracy section reads them when they exist."""
    return [f"{RESULTS}/metrics/{name}"] if ANSWERS else []


def run_pair(path):
    """The pair of a run file <results_dir>/runs/<pair>/..."""
    return Path(path).relative_to(f"{RESULTS}/runs").parts[0]


def reference_files(pair, n, chunks):
    """The Best-of-N files that make Bo-n of `chunks`: a direct run, or shards 0..n/shard_size-1."""
    kind, count = plan.reference_sources(config, n)
    if kind == "direct":
        return [f"{RESULTS}/runs/{pair}/{REFERENCE_DIR}/n{count}/{chunk}.jsonl" for chunk in chunks]
    return [f"{RESULTS}/runs/{pair}/{REFERENCE_DIR}/shard{k}/{chunk}.jsonl" for chunk in chunks for k in range(count)]


def reference_chunk_inputs(wildcards):
    return reference_files(wildcards.pair, int(wildcards.n), CHUNKS)


def reference_shards(wildcards):
    kind, count = plan.reference_sources(config, int(wildcards.n))
    return count if kind == "shards" else 1


def correlation_trajectories(wildcards):
    """The Best-of-N files of a chunk whose responses the correlation study scores: a direct
    Bo-n run, or shards 0..n/shard_size-1 (pooled by the score_prefixes job)."""
    return reference_files(wildcards.pair, config["correlation"]["n"], [wildcards.chunk])


def adaptive_outputs(name, pairs):
    """results/adaptive/<pair>/<name> per pair, when adaptive SR runs with a held-out fit."""
    if not (ADAPTIVE_DELTAS and CALIBRATION_CHUNKS):
        return []
    return [f"{RESULTS}/adaptive/{pair}/{name}" for pair in pairs]


def calibration_fit(pair):
    """The held-out prefix table adaptive SR fits on ([] for the online fit)."""
    return [plan.calibration_fit_file(RESULTS, pair)] if CALIBRATION_CHUNKS else []


def pair_model_files(wildcards, largest_rows=None):
    """The fetch markers of the models a job of this pair loads, and where its generator's graphs are
    built (job_options.builds_graphs) the markers of the row ranges' graphs it runs on, those at or
    below `largest_rows` (every range where that is not known); ancient, so a model fetched again or
    graphs built again (a new machine, an emptied cache) rerun no finished job."""
    pair = PAIRS[wildcards.pair]
    files = [f"{RESULTS}/models/{name}.json" for name in plan.pair_models(config, pair)]
    if job_options.builds_graphs(config, pair["generator"]):
        graphs = job_options.graphs_name(config, pair["generator"])
        files += [f"{RESULTS}/graphs/{graphs}/rows-{rows}.json" for rows in job_options.graph_rows(largest_rows)]
    return [ancient(path) for path in files]


def reference_model_files(wildcards):
    """pair_model_files of a Best-of-N job: its batch of n responses is known, so it waits only on the
    graphs of the ranges at or below n (the first to be built), not on the larger batches' graphs."""
    return pair_model_files(wildcards, int(wildcards.n) if "n" in wildcards.keys() else PLAN.reference["shard_size"])


def graphs_generator(wildcards):
    """The generator a compiled_graphs job builds for: the first of the study's that share its
    model and dtype (job_options.graphs_name)."""
    generators = dict.fromkeys(pair["generator"] for pair in config["pairs"])
    return next(g for g in generators if job_options.builds_graphs(config, g)
                and job_options.graphs_name(config, g) == wildcards.graphs)


def judge_model_files():
    """The fetch marker of a local judge's model ([] for any other judge)."""
    spec = plan.judge_model_spec(config)
    return [ancient(f"{RESULTS}/models/{plan.model_name(spec)}.json")] if spec else []


# --------------------------------------------------------------------------------------
# the engine's options per job (the engine rules call it through scripts/engine_call.py)
# --------------------------------------------------------------------------------------


def reference_params(n, seed_offset=lambda wildcards: 0):
    """params of a Best-of-N rule: `args` (job_options.reference_args, with `n` and `seed_offset`
    functions of the wildcards), the `partial` file the engine writes while the job runs, and
    `prompt_ids`."""

    def args(wildcards):
        return job_options.reference_args(config, PAIRS[wildcards.pair], n=n(wildcards), seed_offset=seed_offset(wildcards))

    return {
        "args": args,
        "partial": lambda wildcards, output: job_options.partial_path(
            RESULTS, output[0], args(wildcards), chunk_params(wildcards.chunk)["digest"]),
        "prompt_ids": lambda wildcards: chunk_params(wildcards.chunk),
    }


def method_run(wildcards):
    """The method_run job's setting: {spec, params, fit_param} (plan.method_settings)."""
    return METHOD_RUNS[(wildcards.method, wildcards.setting)]


def method_run_fit(wildcards):
    """The held-out fit a method_run job reads ([] when its method takes none)."""
    return calibration_fit(wildcards.pair) if method_run(wildcards)["fit_param"] else []


def method_run_source(wildcards):
    """The module file of a method from outside the package ([] for a built-in one): an input, so
    an edited method reruns its jobs."""
    source = job_options.method_source(method_run(wildcards)["spec"])
    return [source] if source else []


def method_run_code(wildcards):
    """params.code of a method_run job (job_options.method_code): its module's digest or specrej's version."""
    return job_options.method_code(method_run(wildcards)["spec"])


def method_run_args(wildcards):
    """params.args of a method_run job (job_options.method_args), the fit file among its params."""
    run = method_run(wildcards)
    fit = {run["fit_param"]: calibration_fit(wildcards.pair)[0]} if run["fit_param"] else {}
    return job_options.method_args(config, PAIRS[wildcards.pair], run["spec"], {**run["params"], **fit},
                                   run["memory_budget"])


def prefix_args(wildcards):
    """params.args of a score_prefixes job."""
    return job_options.prefix_args(config, PAIRS[wildcards.pair])


# --------------------------------------------------------------------------------------
# after a run
# --------------------------------------------------------------------------------------


def dag_jobs(jobs):
    """(rule name, wildcards) of Snakemake `Job`s, as workflow/messages.py takes them."""
    return [(job.rule.name, dict(job.wildcards_dict)) for job in jobs]


def report_start():
    """Before the first job: the study as Snakemake's DAG holds it (every job, the finished
    ones too) and the jobs this run has left (messages.study_overview)."""
    dag = workflow.dag
    print(messages.study_overview(config, PLAN, dag_jobs(dag.jobs), dag_jobs(dag.needrun_jobs())), file=sys.stderr)


def report_failure():
    """After a failed run: each job Snakemake's scheduler recorded as failed, its log, and the
    command that resumes. Also written to results/logs/failure.txt, which `make study` prints
    again after Snakemake's own last lines."""
    failed = sorted(workflow.scheduler.failed, key=lambda job: job.jobid) if workflow.scheduler else []
    jobs = [{"rule": job.rule.name, "logs": [str(path) for path in job.log],
             "wildcards": ", ".join(f"{key}={value}" for key, value in job.wildcards_dict.items())}
            for job in failed]
    message = messages.failure_message(jobs, messages.resume_command(sys.argv, os.environ))
    print(message, file=sys.stderr)
    Path(RESULTS, "logs").mkdir(parents=True, exist_ok=True)
    Path(RESULTS, "logs", "failure.txt").write_text(message + "\n")


def report_after_run():
    """Say how many prompts failed and which method settings lie outside the Best-of-N curve."""
    for message in [messages.failed_prompts_message(RESULTS), *messages.out_of_range_messages(RESULTS)]:
        if message:
            print(message, file=sys.stderr)
