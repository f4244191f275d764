# Helpers shared by the rules: config checks, the prompt chunks, pairs, run paths and the
# argument lists of `specrej generate` / `score-prefixes`. No study logic lives here.

import hashlib
import json
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

PYTHON = sys.executable  # the interpreter running Snakemake, so an inactive venv still works
SCRIPTS = Path(workflow.basedir) / "workflow" / "scripts"
GPU_SLOT = str(SCRIPTS / "gpu_slot.py")  # gives a local GPU job its own GPU (profiles/workstation)
RESULTS = "results"
LOCAL_SUFFIXES = (".json", ".jsonl", ".txt")


# --------------------------------------------------------------------------------------
# config validation: the schema first (one readable line per problem), then cross-checks
# --------------------------------------------------------------------------------------


def validate_config(config, schema):
    """Validate `config` against `schema` (filling defaults) and cross-check its references.

    Any problem stops Snakemake before it plans a job, with one message that names the key.
    """
    import jsonschema

    try:
        validate(config, schema)
    except WorkflowError as error:
        cause = error.__context__  # snakemake raises its WorkflowError while handling this one
        if not isinstance(cause, jsonschema.ValidationError):
            raise
        where = _key_path(cause.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config: {where}: {_schema_message(cause)}") from None
    problems = list(_cross_check(config))
    if problems:
        raise WorkflowError("invalid config: " + "; ".join(problems))


def _key_path(path):
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _schema_message(error):
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{error.message}" + (f" (allowed keys: {', '.join(allowed)})" if allowed else "")
    if error.validator == "enum":
        return f"{error.instance!r} is not one of {', '.join(map(repr, error.validator_value))}"
    if error.validator == "pattern":
        expected = error.schema.get("description") or f"a string matching {error.validator_value}"
        return f"{error.instance!r} is not valid: expected {expected}"
    return error.message


def _cross_check(config):
    for i, pair in enumerate(config["pairs"]):
        for kind in ("generator", "reward"):
            if pair[kind] not in config[f"{kind}s"]:
                yield (f"pairs[{i}].{kind}: {pair[kind]!r} is not defined under {kind}s "
                       f"(defined: {', '.join(config[kind + 's'])})")
    names = [pair_name(p) for p in config["pairs"]]
    if len(set(names)) != len(names):
        yield "pairs: a generator/reward pair is listed twice"
    shard = config["bon"]["shard_size"]
    if shard:
        uneven = [n for n in config["bon"]["n"] if n > shard and n % shard]
        if uneven:
            yield (f"bon.n: {', '.join(map(str, uneven))} above bon.shard_size={shard} must be multiples of it "
                   "(Bo-N is merged from N / shard_size shards)")
        n = config["correlation"]["n"]
        if n > shard and n % shard:
            yield (f"correlation.n: {n} must be a multiple of bon.shard_size={shard} (the study reads "
                   "Best-of-N's first n / shard_size shards)")
    for key in ("correlation.pairs", "figures.figure2.pair", "figures.figure4.pair"):
        value = _get(config, key)
        for name in value if isinstance(value, list) else [value]:
            if name is not None and name not in names:
                yield f"{key}: {name!r} is not a pair (pairs: {', '.join(names)})"
    table1 = config["tables"]["table1_reward"]
    if table1 is not None and table1 not in config["rewards"]:
        yield f"tables.table1_reward: {table1!r} is not defined under rewards"
    table1 = table1 or config["pairs"][0]["reward"]
    labels = [config["generators"][p["generator"]].get("label") or p["generator"]
              for p in config["pairs"] if p["reward"] == table1 and p["generator"] in config["generators"]]
    if len(set(labels)) != len(labels):
        yield (f"generators: the generators paired with the Table 1 reward {table1!r} need distinct labels "
               f"(Table 1 has one column per generator): {', '.join(labels)}")
    source, select = config["prompts"]["source"], config["prompts"]["select"]
    adaptive = config["sr"]["adaptive"]
    calibration = adaptive["calibration_prompts"] if adaptive["deltas"] else None
    if calibration is not None:
        overlap = sorted(set(calibration) & set(select)) if select is not None else calibration
        if overlap:
            yield (f"sr.adaptive.calibration_prompts: {', '.join(map(str, overlap))} "
                   + ("are also in prompts.select" if select is not None else "are study prompts (prompts.select "
                      "is null: every prompt)")
                   + ": the fit must come from held-out prompts, or it would be tested on its own data")
    local = local_source(source)
    if local is not None:
        if not Path(local).is_file():
            yield f"prompts.source: file not found: {source}"
    elif select is None:
        yield (f"prompts.source {source!r} is a Hugging Face dataset: give prompts.select (the row indices) "
               "so the jobs can be planned before it is downloaded")


def _get(config, dotted):
    for key in dotted.split("."):
        config = config[key]
    return config


def local_source(source):
    """The path of a local prompt file (relative to the working directory, else to the
    workflow's folder), or None for a Hugging Face dataset spec."""
    path = Path(source)
    if not path.exists() and not path.is_absolute() and (Path(workflow.basedir) / path).exists():
        return str(Path(workflow.basedir) / path)
    return source if path.exists() or source.endswith(LOCAL_SUFFIXES) else None


# --------------------------------------------------------------------------------------
# prompts: ids known at planning time, split into chunks (one generation job per chunk)
# --------------------------------------------------------------------------------------


def _slug(value):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))[:60] or "_"


def calibration_select(config):
    """Row indices of the held-out prompts that fit adaptive SR's model ([] when not used)."""
    adaptive = config["sr"]["adaptive"]
    return list(adaptive["calibration_prompts"] or []) if adaptive["deltas"] else []


def prepared_select(config):
    """The rows results/prompts/prompts.jsonl holds: the study's, then the held-out ones."""
    select = config["prompts"]["select"]
    return None if select is None else [*select, *calibration_select(config)]


def plan_prompts(config, select=None):
    """[(prompt_id, prompt text or None)] of rows `select` (default: the study's), in order."""
    source = local_source(config["prompts"]["source"])
    select = config["prompts"]["select"] if select is None else select
    if source is None:
        return [(index, None) for index in select]
    from specrej.io import read_prompts  # torch-free
    from specrej.errors import SpecrejError

    try:
        items = read_prompts(source)
    except SpecrejError as error:
        raise WorkflowError(f"invalid config: prompts.source: {error}") from None
    if select is not None:
        out_of_range = [i for i in select if i >= len(items)]
        if out_of_range:
            raise WorkflowError(f"invalid config: prompts.select: indices {out_of_range} are out of range "
                                f"({source} has {len(items)} prompts)")
        items = [items[i] for i in select]
    return [(item.prompt_id, item.prompt) for item in items]


def plan_chunks(prompts, size, prefix="chunk"):
    """{chunk name: [(prompt_id, text)]}; with one prompt per chunk the name is the prompt id
    (for the study's chunks, prefix "chunk"), else prefix + a number."""
    groups = [prompts[i:i + size] for i in range(0, len(prompts), size)]
    names = [_slug(group[0][0]) for group in groups] if size == 1 and prefix == "chunk" else []
    if not names or len(set(names)) != len(names):
        names = [f"{prefix}{i:04d}" for i in range(len(groups))]
    return dict(zip(names, groups))


def chunk_params(chunk):
    """Prompt ids of a chunk and a digest of their texts: a changed prompt reruns its jobs."""
    group = ALL_CHUNKS[chunk]
    digest = hashlib.sha256(json.dumps([[str(i), t] for i, t in group]).encode()).hexdigest()[:16]
    return {"ids": [i for i, _ in group], "digest": digest}


# --------------------------------------------------------------------------------------
# pairs, methods and the run files
# --------------------------------------------------------------------------------------


def pair_name(pair):
    return f"{pair['generator']}--{pair['reward']}"


def generator_of(pair):
    return config["generators"][PAIRS[pair]["generator"]]


def reward_of(pair):
    return config["rewards"][PAIRS[pair]["reward"]]


def label(kind, key):
    return config[kind][key].get("label") or key


def pair_labels(pair):
    """Display names: generator, reward, and 'generator / reward'."""
    g, r = label("generators", PAIRS[pair]["generator"]), label("rewards", PAIRS[pair]["reward"])
    return {"generator": g, "reward": r, "pair": f"{g} / {r}"}


def fmt_alpha(alpha):
    return f"{alpha:g}"


def bon_sources(n):
    """How Bo-N is made: ('shards', k) merges shards 0..k-1; ('direct', n) is one run of N."""
    shard = config["bon"]["shard_size"]
    if shard and n >= shard:
        return "shards", n // shard
    return "direct", n


def bon_chunk_inputs(wildcards):
    kind, count = bon_sources(int(wildcards.n))
    if kind == "direct":
        return expand(f"{RESULTS}/runs/{{pair}}/bon/n{{n}}/{{chunk}}.jsonl", pair=wildcards.pair, n=count,
                      chunk=CHUNKS)
    return [f"{RESULTS}/runs/{wildcards.pair}/bon/shard{k}/{chunk}.jsonl" for chunk in CHUNKS for k in range(count)]


def correlation_trajectories(wildcards):
    """The Best-of-N files of a chunk whose responses the correlation study scores: a direct
    Bo-n run, or shards 0..n/shard_size-1 (pooled by the score_prefixes job)."""
    n = config["correlation"]["n"]
    kind, count = bon_sources(n)
    if kind == "direct":
        return [f"{RESULTS}/runs/{wildcards.pair}/bon/n{n}/{wildcards.chunk}.jsonl"]
    return [f"{RESULTS}/runs/{wildcards.pair}/bon/shard{k}/{wildcards.chunk}.jsonl" for k in range(count)]


def bon_shards(wildcards):
    kind, count = bon_sources(int(wildcards.n))
    return count if kind == "shards" else 1


def merged_runs(pairs=None):
    """The per-pair run files the metrics read: Bo-N for every N, SR for every alpha and every
    adaptive delta."""
    pairs = PAIRS if pairs is None else pairs
    return [f"{RESULTS}/runs/{p}/bon/n{n}.jsonl" for p in pairs for n in sorted(config["bon"]["n"])] + [
        f"{RESULTS}/runs/{p}/sr/alpha{fmt_alpha(a)}.jsonl" for p in pairs for a in sorted(config["sr"]["alphas"])
    ] + [f"{RESULTS}/runs/{p}/sr/delta{fmt_alpha(d)}.jsonl" for p in pairs for d in ADAPTIVE_DELTAS]


def adaptive_outputs(name, pairs):
    """results/adaptive/<pair>/<name> per pair, when adaptive SR runs with a held-out fit."""
    if not (ADAPTIVE_DELTAS and CALIBRATION_CHUNKS):
        return []
    return [f"{RESULTS}/adaptive/{pair}/{name}" for pair in pairs]


def calibration_fit(pair):
    """The held-out prefix table adaptive SR fits on ([] for the online fit)."""
    return [f"{RESULTS}/adaptive/{pair}/calibration_prefixes.parquet"] if CALIBRATION_CHUNKS else []


def run_pair(path):
    """The pair of a run file results/runs/<pair>/..."""
    return Path(path).relative_to(f"{RESULTS}/runs").parts[0]


# --------------------------------------------------------------------------------------
# command lines
# --------------------------------------------------------------------------------------


def _join(args):
    return " ".join(shlex.quote(str(a)) for a in args)


def generate_args(pair, method, *, n=None, alpha=None, seed_offset=0, decision_tokens=(), delta=None, fit=None):
    """`specrej generate` options for one job of `pair` (everything but --prompts/--out);
    `delta` (and the prefix table `fit`, if any) makes an SR job use the adaptive rule."""
    g, r, s = generator_of(pair), reward_of(pair), config["sampling"]
    args = ["--model", g["model"], "--reward", r["model"], "--method", method,
            "--max-new-tokens", s["max_new_tokens"], "--temperature", s["temperature"], "--top-p", s["top_p"],
            "--top-k", s["top_k"], "--seed", s["seed"] + seed_offset, "--device", config["device"],
            "--dtype", g["dtype"] or config["dtype"], "--reward-batch-size", r["batch_size"], "--no-progress",
            "--exit-zero"]  # a chunk whose every prompt fails is a result (error records), not a failed job
    block = config["bon"] if method == "bon" else config["sr"]
    if method == "bon":
        args += ["--n", n]
    else:
        args += ["--alpha", alpha, "--min-tokens", block["min_tokens"], "--max-init-batch", block["max_init_batch"]]
        if decision_tokens:
            args += ["--decision-tokens", ",".join(map(str, decision_tokens))]
        if delta is not None:
            args += ["--rejection", "adaptive", "--delta", delta] + (["--fit", fit] if fit else [])
    if block["batch_size"]:
        args += ["--batch-size", min(block["batch_size"], n) if method == "bon" else block["batch_size"]]
    if block["memory_budget"] or config["memory_budget"]:
        args += ["--memory-budget", block["memory_budget"] or config["memory_budget"]]
    if g["trust_remote_code"] or r["trust_remote_code"]:
        args += ["--trust-remote-code"]
    return _join(args)


def partial_path(output, args):
    """Where the engine writes while a job runs (moved onto the output when it finishes): a
    killed job leaves it behind and the rerun resumes it; its name carries a digest of the
    settings, so a rerun with other settings never appends to it."""
    digest = hashlib.sha256(args.encode()).hexdigest()[:12]
    return f"{RESULTS}/.partial/{Path(output).relative_to(RESULTS)}.{digest}.jsonl"


def prefix_args(pair):
    g, r = generator_of(pair), reward_of(pair)
    taus = ",".join(map(str, sorted(config["correlation"]["decision_tokens"])))
    args = ["--reward", r["model"], "--decision-tokens", taus,
            "--device", config["device"], "--dtype", r["dtype"] or config["dtype"],
            "--reward-batch-size", r["batch_size"], "--no-progress"]
    if r["model"] != "logprob":
        args += ["--model", g["model"]]
    if g["trust_remote_code"] or r["trust_remote_code"]:
        args += ["--trust-remote-code"]
    return [str(a) for a in args]


def needs_gpu(pair, step):
    """GPUs for a job: none for the free logprob prefix scores."""
    if step == "score_prefixes" and reward_of(pair)["model"] == "logprob":
        return 0
    return config["resources"][step]["gpu"]


# --------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------


def setup_plan(config):
    """The jobs' dimensions, as globals for the rule files (after the config is validated)."""
    global PAIRS, CHUNKS, CALIBRATION_CHUNKS, ALL_CHUNKS, ADAPTIVE_DELTAS
    global CORRELATION_PAIRS, TABLE1_PAIRS, TABLE2_PAIRS, FIGURE2_PAIR, FIGURE4_PAIR
    PAIRS = {pair_name(p): p for p in config["pairs"]}
    size = config["prompts"]["chunk_size"]
    CHUNKS = plan_chunks(plan_prompts(config), size)
    calibration = calibration_select(config)
    CALIBRATION_CHUNKS = plan_chunks(plan_prompts(config, calibration), size, "calibration") if calibration else {}
    ALL_CHUNKS = {**CHUNKS, **CALIBRATION_CHUNKS}
    ADAPTIVE_DELTAS = sorted(config["sr"]["adaptive"]["deltas"])
    pairs = config["correlation"]["pairs"]
    CORRELATION_PAIRS = list(PAIRS) if pairs is None else list(pairs)
    table1 = config["tables"]["table1_reward"] or config["pairs"][0]["reward"]
    TABLE1_PAIRS = [p for p in PAIRS if PAIRS[p]["reward"] == table1]
    TABLE2_PAIRS = [p for p in PAIRS if PAIRS[p]["reward"] == config["tables"]["table2_reward"]]
    first = CORRELATION_PAIRS[0] if CORRELATION_PAIRS else None
    FIGURE2_PAIR = config["figures"]["figure2"]["pair"] or first
    FIGURE4_PAIR = config["figures"]["figure4"]["pair"] or first


wildcard_constraints:
    pair="[^/]+",
    chunk="[^/]+",
    n=r"\d+",
    k=r"\d+",
    alpha=r"[0-9.]+",
    delta=r"[0-9.]+",
    setting=r"(alpha|delta)[0-9.]+",
    study="correlation|adaptive",


# --------------------------------------------------------------------------------------
# the one shell command of every generation job (rules differ only in their params)
# --------------------------------------------------------------------------------------

# The engine appends to a partial file named by the settings and resumes it when a killed job
# is rerun; only a finished file is moved onto the output, so Snakemake never sees a half run.
# PYTHON and GPU_SLOT are globals, not params: a different venv path must not rerun anything.
GENERATE_SHELL = (
    "mkdir -p \"$(dirname {params.partial:q})\" && "
    "{PYTHON:q} {GPU_SLOT:q} --gpus {resources.gpu} -- env OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
    "{PYTHON:q} -m specrej.cli generate {params.args} --prompts {input.prompts:q} --out {params.partial:q} "
    "> {log:q} 2>&1 && mv {params.partial:q} {output:q}"
)


def generation_params(method, **options):
    """params of a generation rule: `options` are generate_args' keywords, values may be
    functions of the wildcards."""

    def args(wildcards):
        resolved = {k: (v(wildcards) if callable(v) else v) for k, v in options.items()}
        return generate_args(wildcards.pair, method, **resolved)

    return {
        "args": args,
        "partial": lambda wildcards, output: partial_path(output[0], args(wildcards)),
        "prompt_ids": lambda wildcards: chunk_params(wildcards.chunk),
    }


def res(step, key):
    return lambda wildcards: config["resources"][step][key]


def local_judge():
    """Whether Table 1's judge is a local model: `local:<model>`, or `auto` without an OpenAI key
    (decided when the jobs are planned; the job itself decides `auto` again when it runs)."""
    judge = config["evaluation"]["judge"]
    if judge == "auto":
        from analysis.judge_registry import api_key_present  # standard library only

        return not api_key_present()
    return judge is not None and judge.startswith("local:")


def judge_resource(key):
    """The win-rate job's `key`: resources.evaluate for a local model judge (its GPU, threads,
    memory); for no judge, `longest` or the API judge, an analysis job's, without a GPU."""
    if local_judge():
        return config["resources"]["evaluate"][key]
    return 0 if key == "gpu" else config["resources"]["analysis"][key]


def report_failed_prompts():
    """After a run: say how many prompts failed (they are left out of the tables)."""
    import csv

    path = Path(RESULTS) / "failed_prompts.csv"
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if rows:
        prompts = sorted({row["prompt_id"] for row in rows})
        print(f"specrej: {len(prompts)} prompt(s) failed in {len(rows)} run(s) and are left out of the tables: "
              f"{', '.join(prompts)} (see {path})", file=sys.stderr)


def report_out_of_range():
    """After a run: name every SR point whose score lies outside its pair's Best-of-N curve (its
    BoN-equivalent compute is then not a measurement: extend bon.n or change the operating point)."""
    import csv

    path = Path(RESULTS) / "metrics" / "bon_equivalent.csv"
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as handle:
        outside = [row for row in csv.DictReader(handle) if row["bon_equivalent_status"] != "interpolated"]
    for row in outside:
        where = {"below_range": "below Bo-N_min", "above_range": "above the largest Best-of-N"}.get(
            row["bon_equivalent_status"], row["bon_equivalent_status"])
        print(f"specrej: {row['pair']} {row['method_label']} scores {float(row['improvement']):.1f}, {where}: "
              f"its BoN-equivalent compute is not interpolated (see {path})", file=sys.stderr)

