"""The workflow's plain Python, importable without Snakemake (tests/workflow/test_plan.py).

workflow/rules/common.smk imports this module and keeps only what needs Snakemake (wildcards,
input functions, the globals the rules read). Everything here is a function of the validated
config dict:

- ``validate_config``: the JSON schema (filling its defaults), then the cross-references between
  keys; any problem is one ``ConfigError`` naming the key.
- ``Plan``: the jobs' dimensions (pairs, prompt chunks, deltas, the pairs of each table and
  figure), built once the config is valid.
- ``generate_args`` / ``prefix_args``: the options of ``specrej generate`` / ``score-prefixes``
  per job (the CLI's flags, checked against ``specrej.cli.build_parser`` by the tests).
- ``failed_prompts_message`` / ``out_of_range_messages``: what ``onsuccess`` prints.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import re
import shlex
from pathlib import Path

LOCAL_SUFFIXES = (".json", ".jsonl", ".txt")


class ConfigError(ValueError):
    """An invalid config: the message starts with "invalid config: " and names the key."""


# --------------------------------------------------------------------------------------
# config validation: the schema first (one readable line per problem), then cross-checks
# --------------------------------------------------------------------------------------


def validate_config(config: dict, schema_path, basedir=".") -> None:
    """Validate `config` against the YAML schema at `schema_path`, filling the schema's defaults
    into `config` (in place), then cross-check its references (`basedir`: the workflow's folder,
    where a relative prompt file is also looked for)."""
    import jsonschema
    import yaml

    with open(schema_path, encoding="utf-8") as handle:
        schema = yaml.safe_load(handle)
    try:
        _default_filling_validator(schema).validate(config)
    except jsonschema.ValidationError as error:
        where = key_path(error.absolute_path) or "(top level)"
        raise ConfigError(f"invalid config: {where}: {schema_message(error)}") from None
    problems = [*cross_check(config, basedir), *check_methods(config)]
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))


def _default_filling_validator(schema):
    """A Draft 2020-12 validator that also sets each property's `default` where it is missing
    (jsonschema's FAQ recipe; the same as snakemake.utils.validate(..., set_default=True))."""
    from jsonschema import Draft202012Validator, validators

    validate_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        for name, subschema in properties.items():
            if "default" in subschema:
                instance.setdefault(name, subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})(schema)


def key_path(path) -> str:
    """A config key as written in messages: ['pairs', 0, 'generator'] -> 'pairs[0].generator'."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def schema_message(error) -> str:
    """One line for a jsonschema error: the allowed keys, choices or expected form."""
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{error.message}" + (f" (allowed keys: {', '.join(allowed)})" if allowed else "")
    if error.validator == "enum":
        return f"{error.instance!r} is not one of {', '.join(map(repr, error.validator_value))}"
    if error.validator == "pattern":
        expected = error.schema.get("description") or f"a string matching {error.validator_value}"
        return f"{error.instance!r} is not valid: expected {expected}"
    return error.message


def cross_check(config: dict, basedir="."):
    """Yield one message per reference the schema cannot check (a pair naming an undefined model,
    shard sizes that do not divide N, held-out prompts that are also study prompts, ...)."""
    for i, pair in enumerate(config["pairs"]):
        for kind, section in (("generator", "generators"), ("reward", "rewards")):
            if pair[kind] not in config[section]:
                yield (f"pairs[{i}].{kind}: {pair[kind]!r} is not defined under {section} "
                       f"(defined: {', '.join(config[section])})")
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
    calibration = calibration_select(config) or None
    if calibration is not None:
        overlap = sorted(set(calibration) & set(select)) if select is not None else calibration
        if overlap:
            yield (f"sr.adaptive.calibration_prompts: {', '.join(map(str, overlap))} "
                   + ("are also in prompts.select" if select is not None else "are study prompts (prompts.select "
                      "is null: every prompt)")
                   + ": the fit must come from held-out prompts, or it would be tested on its own data")
    local = local_source(source, basedir)
    if local is not None:
        if not Path(local).is_file():
            yield f"prompts.source: file not found: {source}"
    elif select is None:
        yield (f"prompts.source {source!r} is a Hugging Face dataset: give prompts.select (the row indices) "
               "so the jobs can be planned before it is downloaded")


def _get(config: dict, dotted: str):
    for key in dotted.split("."):
        config = config[key]
    return config


def local_source(source: str, basedir=".") -> str | None:
    """The path of a local prompt file (relative to the working directory, else to `basedir`,
    the workflow's folder), or None for a Hugging Face dataset spec."""
    path = Path(source)
    if not path.exists() and not path.is_absolute() and (Path(basedir) / path).exists():
        return str(Path(basedir) / path)
    return source if path.exists() or source.endswith(LOCAL_SUFFIXES) else None


# --------------------------------------------------------------------------------------
# prompts: ids known at planning time, split into chunks (one generation job per chunk)
# --------------------------------------------------------------------------------------


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))[:60] or "_"


def calibration_select(config: dict) -> list[int]:
    """Row indices of the held-out prompts that fit adaptive SR's model ([] when not used)."""
    adaptive = config["sr"]["adaptive"]
    return list(adaptive["calibration_prompts"] or []) if adaptive["deltas"] else []


def prepared_select(config: dict) -> list[int] | None:
    """The rows results/prompts/prompts.jsonl holds: the study's, then the held-out ones."""
    select = config["prompts"]["select"]
    return None if select is None else [*select, *calibration_select(config)]


def plan_prompts(config: dict, select=None, basedir=".") -> list[tuple]:
    """[(prompt_id, prompt text or None)] of rows `select` (default: the study's), in order; the
    texts are None for a Hugging Face dataset (not downloaded to plan)."""
    source = local_source(config["prompts"]["source"], basedir)
    select = config["prompts"]["select"] if select is None else select
    if source is None:
        return [(index, None) for index in select]
    from specrej.errors import SpecrejError
    from specrej.io import read_prompts  # torch-free

    try:
        items = read_prompts(source)
    except SpecrejError as error:
        raise ConfigError(f"invalid config: prompts.source: {error}") from None
    if select is not None:
        out_of_range = [i for i in select if i >= len(items)]
        if out_of_range:
            raise ConfigError(f"invalid config: prompts.select: indices {out_of_range} are out of range "
                              f"({source} has {len(items)} prompts)")
        items = [items[i] for i in select]
    return [(item.prompt_id, item.prompt) for item in items]


def plan_chunks(prompts: list[tuple], size: int, prefix: str = "chunk") -> dict[str, list[tuple]]:
    """{chunk name: [(prompt_id, text)]}; with one prompt per chunk the name is the prompt id
    (for the study's chunks, prefix "chunk"), else prefix + a number."""
    groups = [prompts[i:i + size] for i in range(0, len(prompts), size)]
    names = [_slug(group[0][0]) for group in groups] if size == 1 and prefix == "chunk" else []
    if not names or len(set(names)) != len(names):
        names = [f"{prefix}{i:04d}" for i in range(len(groups))]
    return dict(zip(names, groups))


def chunk_params(group: list[tuple]) -> dict:
    """Prompt ids of a chunk and a digest of their texts: a changed prompt reruns its jobs."""
    digest = hashlib.sha256(json.dumps([[str(i), t] for i, t in group]).encode()).hexdigest()[:16]
    return {"ids": [i for i, _ in group], "digest": digest}


# --------------------------------------------------------------------------------------
# pairs, methods and the run files
# --------------------------------------------------------------------------------------


def pair_name(pair: dict) -> str:
    return f"{pair['generator']}--{pair['reward']}"


def label(config: dict, kind: str, key: str) -> str:
    """The display name of generators[key] or rewards[key] (`kind`): its label, else the key."""
    return config[kind][key].get("label") or key


def fmt_alpha(alpha: float) -> str:
    """An alpha or delta as it appears in file names: 0.5 -> '0.5', 1e-05 -> '1e-05'."""
    return f"{alpha:g}"


def bon_sources(config: dict, n: int) -> tuple[str, int]:
    """How Bo-N is made: ('shards', k) merges shards 0..k-1; ('direct', n) is one run of N."""
    shard = config["bon"]["shard_size"]
    if shard and n >= shard:
        return "shards", n // shard
    return "direct", n


class Plan:
    """The jobs' dimensions, from a validated config: the globals the rule files read."""

    def __init__(self, config: dict, basedir="."):
        self.pairs = {pair_name(p): p for p in config["pairs"]}
        size = config["prompts"]["chunk_size"]
        self.chunks = plan_chunks(plan_prompts(config, basedir=basedir), size)
        calibration = calibration_select(config)
        self.calibration_chunks = (plan_chunks(plan_prompts(config, calibration, basedir), size, "calibration")
                                   if calibration else {})
        self.all_chunks = {**self.chunks, **self.calibration_chunks}
        self.adaptive_deltas = sorted(config["sr"]["adaptive"]["deltas"])
        pairs = config["correlation"]["pairs"]
        self.correlation_pairs = list(self.pairs) if pairs is None else list(pairs)
        table1 = config["tables"]["table1_reward"] or config["pairs"][0]["reward"]
        self.table1_pairs = [p for p in self.pairs if self.pairs[p]["reward"] == table1]
        self.table2_pairs = [p for p in self.pairs if self.pairs[p]["reward"] == config["tables"]["table2_reward"]]
        first = self.correlation_pairs[0] if self.correlation_pairs else None
        self.figure2_pair = config["figures"]["figure2"]["pair"] or first
        self.figure4_pair = config["figures"]["figure4"]["pair"] or first


def pair_labels(config: dict, pair: dict) -> dict[str, str]:
    """Display names of a pair ({'generator': ..., 'reward': ...}): generator, reward, and
    'generator / reward'."""
    g, r = label(config, "generators", pair["generator"]), label(config, "rewards", pair["reward"])
    return {"generator": g, "reward": r, "pair": f"{g} / {r}"}


def merged_runs(config: dict, results: str, pairs, deltas) -> list[str]:
    """The per-pair run files the metrics read: Bo-N for every N, SR for every alpha and every
    adaptive delta in `deltas`."""
    runs = f"{results}/runs"
    return [f"{runs}/{p}/bon/n{n}.jsonl" for p in pairs for n in sorted(config["bon"]["n"])] + [
        f"{runs}/{p}/{method}/{setting}.jsonl" for p in pairs for method, setting in method_settings(config)
    ] + [f"{runs}/{p}/sr/delta{fmt_alpha(d)}.jsonl" for p in pairs for d in deltas]


# --------------------------------------------------------------------------------------
# models: each one the study loads is fetched and prepared once, by a job of its own
# --------------------------------------------------------------------------------------


def model_name(spec: str) -> str:
    """A file name for the fetch job of model `spec`: readable, and distinct per spec."""
    readable = _slug(Path(spec).name or spec)
    return f"{readable}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def reward_model_spec(spec: str) -> str | None:
    """The model behind reward `spec`, or None for the rewards that are not models."""
    return None if spec == "logprob" or spec.startswith("python:") else spec


def judge_model_spec(config: dict) -> str | None:
    """The local model behind Table 1's judge, when the plan uses one."""
    from analysis.judge_registry import DEFAULT_LOCAL_JUDGE, LOCAL_PREFIX  # standard library only

    judge = config["evaluation"]["judge"]
    if not local_judge(config):
        return None
    judge = DEFAULT_LOCAL_JUDGE if judge in ("auto", "local") else judge
    return judge[len(LOCAL_PREFIX):]


def study_models(config: dict) -> dict[str, str]:
    """{model_name: spec} of every model the study loads: each pair's generator and reward
    model, and a local judge's model."""
    specs = []
    for pair in config["pairs"]:
        specs.append(config["generators"][pair["generator"]]["model"])
        specs.append(reward_model_spec(config["rewards"][pair["reward"]]["model"]))
    specs.append(judge_model_spec(config))
    return {model_name(spec): spec for spec in dict.fromkeys(specs) if spec is not None}


def pair_models(config: dict, pair: dict) -> list[str]:
    """The model names (`study_models`) that a job of `pair` loads."""
    specs = [config["generators"][pair["generator"]]["model"],
             reward_model_spec(config["rewards"][pair["reward"]]["model"])]
    return [model_name(spec) for spec in specs if spec is not None]


# --------------------------------------------------------------------------------------
# command lines: the options of `specrej generate` / `specrej score-prefixes` per job
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# methods: SR's alphas and the config's `methods:` entries, one run file per setting
# --------------------------------------------------------------------------------------

SCHEDULE_KEYS = ("batch_size", "min_tokens", "max_init_batch", "decision_tokens")  # the sr block's


def method_settings(config: dict) -> dict[tuple[str, str], dict]:
    """{(method directory, setting name): {"spec", "params"}} of every run the generic method
    rule makes: SR at each of sr.alphas, then each `methods:` entry at every combination of its
    grid. The directory is the method's name, the setting its `Method.setting_name`."""
    from specrej.methods import get_method

    entries = [{"name": "sr", "grid": {"alpha": sorted(config["sr"]["alphas"])}}, *config.get("methods", [])]
    runs = {}
    for entry in entries:
        method = get_method(entry["name"])
        keys = list(entry.get("grid", {}))
        for values in itertools.product(*(entry["grid"][key] for key in keys)):
            params = dict(zip(keys, values))
            runs[(method.name, method.setting_name(method.resolve(params)))] = {"spec": entry["name"],
                                                                                "params": params}
    return runs


def check_methods(config: dict):
    """Yield one message per `methods:` problem: an unknown method, a parameter it does not
    take, a value out of its declared range (each naming the entry and the key)."""
    from specrej.errors import SpecrejError
    from specrej.methods import get_method

    seen = {}
    for i, entry in enumerate(config.get("methods", [])):
        try:
            method = get_method(entry["name"])
        except SpecrejError as error:
            yield f"methods[{i}].name: {error}"
            continue
        if method.name in ("bon", "sr-adaptive"):
            yield (f"methods[{i}].name: {method.name} has its own block (bon.n for the ladder, sr.adaptive for "
                   "adaptive SR)")
            continue
        for key, values in entry.get("grid", {}).items():
            for value in values:
                try:
                    method.param(key).check(value, method.description)
                except SpecrejError as error:
                    yield f"methods[{i}].grid.{key}: {error}"
        if method.name in seen:
            yield f"methods[{i}].name: {method.name} is listed twice (methods[{seen[method.name]}]); merge the grids"
        seen[method.name] = i


def method_args(config: dict, pair: dict, spec: str, params: dict) -> str:
    """`specrej generate` options of one setting's job: the common ones, `--method SPEC`, its
    grid values and the sr block's schedule settings as --param NAME=VALUE."""
    from specrej.methods import get_method

    method = get_method(spec)
    declared = {p.name for p in method.params}
    block = config["sr"]
    values = {key: block[key] for key in SCHEDULE_KEYS if key in declared and block[key] not in (None, [])}
    values.update(params)
    args = common_args(config, pair, spec)
    for key, value in values.items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
        args += ["--param", f"{key}={text}"]
    budget = block["memory_budget"] or config["memory_budget"]
    if budget:
        args += ["--memory-budget", budget]
    return join_args(args + remote_code_args(config, pair))


def join_args(args) -> str:
    """One shell-quoted string (shlex.split gives the list back)."""
    return " ".join(shlex.quote(str(a)) for a in args)


def generate_args(config: dict, pair: dict, method: str, *, n=None, alpha=None, seed_offset=0, decision_tokens=(),
                  delta=None, fit=None) -> str:
    """`specrej generate` options for one job of `pair` (everything but --prompts/--out), quoted
    into one string (a job's `params.args`: a changed string reruns the job); `delta` (and the
    prefix table `fit`, if any) makes an SR job use the adaptive rule."""
    args = common_args(config, pair, method, seed_offset)
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
    return join_args(args + remote_code_args(config, pair))


def common_args(config: dict, pair: dict, method: str, seed_offset: int = 0) -> list:
    """The options every generation job of `pair` shares: models, method, sampling, device, dtype."""
    g, r, s = config["generators"][pair["generator"]], config["rewards"][pair["reward"]], config["sampling"]
    return ["--model", g["model"], "--reward", r["model"], "--method", method,
            "--max-new-tokens", s["max_new_tokens"], "--temperature", s["temperature"], "--top-p", s["top_p"],
            "--top-k", s["top_k"], "--seed", s["seed"] + seed_offset, "--device", config["device"],
            "--dtype", g["dtype"] or config["dtype"], "--reward-batch-size", r["batch_size"], "--no-progress",
            "--exit-zero"]  # a chunk whose every prompt fails is a result (error records), not a failed job


def remote_code_args(config: dict, pair: dict) -> list:
    g, r = config["generators"][pair["generator"]], config["rewards"][pair["reward"]]
    return ["--trust-remote-code"] if g["trust_remote_code"] or r["trust_remote_code"] else []


def partial_path(results: str, output: str, args: str) -> str:
    """Where the engine writes while a job runs (moved onto the output when it finishes): a
    killed job leaves it behind and the rerun resumes it; its name carries a digest of the
    settings, so a rerun with other settings never appends to it."""
    digest = hashlib.sha256(args.encode()).hexdigest()[:12]
    return f"{results}/.partial/{Path(output).relative_to(results)}.{digest}.jsonl"


def prefix_args(config: dict, pair: dict) -> list[str]:
    """`specrej score-prefixes` options for `pair` (everything but --trajectories/--out)."""
    g, r = config["generators"][pair["generator"]], config["rewards"][pair["reward"]]
    taus = ",".join(map(str, sorted(config["correlation"]["decision_tokens"])))
    args = ["--reward", r["model"], "--decision-tokens", taus,
            "--device", config["device"], "--dtype", r["dtype"] or config["dtype"],
            "--reward-batch-size", r["batch_size"], "--no-progress"]
    if r["model"] != "logprob":
        args += ["--model", g["model"]]
    if g["trust_remote_code"] or r["trust_remote_code"]:
        args += ["--trust-remote-code"]
    return [str(a) for a in args]


# --------------------------------------------------------------------------------------
# resources: what a scheduler places each job by (config `resources`)
# --------------------------------------------------------------------------------------


def needs_gpu(config: dict, pair: dict, step: str) -> int:
    """GPUs for a job of `step` ('generate' or 'score_prefixes'): none for the free logprob
    prefix scores."""
    if step == "score_prefixes" and config["rewards"][pair["reward"]]["model"] == "logprob":
        return 0
    return config["resources"][step]["gpu"]


def local_judge(config: dict) -> bool:
    """Whether Table 1's judge is a local model: `local:<model>`, or `auto` without an OpenAI key
    (decided when the jobs are planned; the job itself decides `auto` again when it runs)."""
    judge = config["evaluation"]["judge"]
    if judge == "auto":
        from analysis.judge_registry import api_key_present  # standard library only

        return not api_key_present()
    return judge is not None and judge.startswith("local:")


def judge_resources(config: dict) -> dict:
    """The win-rate job's threads, gpu, mem_mb and runtime: resources.evaluate for a local model
    judge; for no judge, `longest` or the API judge, an analysis job's, without a GPU."""
    if local_judge(config):
        return dict(config["resources"]["evaluate"])
    return {**config["resources"]["analysis"], "gpu": 0}


# --------------------------------------------------------------------------------------
# after a run: what `onsuccess` prints
# --------------------------------------------------------------------------------------


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def failed_prompts_message(results: str) -> str | None:
    """How many prompts failed (they are left out of the tables), or None."""
    path = Path(results) / "failed_prompts.csv"
    rows = _read_csv(path) if path.exists() else []
    if not rows:
        return None
    prompts = sorted({row["prompt_id"] for row in rows})
    return (f"specrej: {len(prompts)} prompt(s) failed in {len(rows)} run(s) and are left out of the tables: "
            f"{', '.join(prompts)} (see {path})")


def out_of_range_messages(results: str) -> list[str]:
    """One line per method setting whose score lies outside its pair's Best-of-N curve (its
    BoN-equivalent compute is then not a measurement: extend bon.n or change the operating point)."""
    path = Path(results) / "metrics" / "bon_equivalent.csv"
    rows = _read_csv(path) if path.exists() else []
    where = {"below_range": "below Bo-N_min", "above_range": "above the largest Best-of-N"}
    return [f"specrej: {row['pair']} {row['method_label']} scores {float(row['improvement']):.1f}, "
            f"{where.get(row['bon_equivalent_status'], row['bon_equivalent_status'])}: "
            f"its BoN-equivalent compute is not interpolated (see {path})"
            for row in rows if row["bon_equivalent_status"] != "interpolated"]



# --------------------------------------------------------------------------------------
# after a failed run: what `onerror` prints
# --------------------------------------------------------------------------------------


_JOB_BLOCK = re.compile(r"^(?:(?P<error>Error in rule)|(?:local)?rule) (?P<rule>\S+):$")
_JOB_FIELD = re.compile(r"^\s+(?P<key>jobid|wildcards|log): (?P<value>.*)$")


def failed_jobs(snakemake_log: str) -> list[dict]:
    """[{rule, wildcards, logs}] of each "Error in rule ...:" block of a Snakemake log, in order.
    The wildcards come from the block that started the job (same jobid), as Snakemake prints
    them; the logs without Snakemake's "(check log ...)" note."""
    blocks, block = [], None
    for line in snakemake_log.splitlines():
        started = _JOB_BLOCK.match(line)
        if started:
            block = {"error": bool(started["error"]), "rule": started["rule"], "jobid": None, "wildcards": "",
                     "logs": []}
            blocks.append(block)
            continue
        field = _JOB_FIELD.match(line)
        if block is None or not field:
            block = None if not line.startswith((" ", "\t")) else block
            continue
        if field["key"] == "log":
            value = re.sub(r"\s*\(check log file\(s\) for error details\)\s*$", "", field["value"])
            block["logs"] = [part.strip() for part in value.split(",") if part.strip()]
        else:
            block[field["key"]] = field["value"].strip()
    started = {b["jobid"]: b for b in blocks if not b["error"]}
    return [{"rule": b["rule"], "wildcards": b["wildcards"] or started.get(b["jobid"], {}).get("wildcards", ""),
             "logs": b["logs"]} for b in blocks if b["error"]]


def last_line(path) -> str | None:
    """The last non-blank line of a job's log (the engine ends with its one-line error), if any."""
    try:
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def failure_message(jobs: list[dict], resume: str) -> str:
    """What a user reads when the workflow stopped: each failed job, its log and that log's last
    line, then the one command that resumes (finished jobs are kept)."""
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
