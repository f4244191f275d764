"""The workflow's plain Python, importable without Snakemake (tests/workflow/test_plan.py).

workflow/rules/common.smk imports this module and keeps only what needs Snakemake (wildcards,
input functions, the globals the rules read). Everything here is a function of the validated
config dict:

- ``validate_config``: the JSON schema (filling its defaults), then the cross-references between
  keys; any problem is one ``ConfigError`` naming the key.
- ``Plan``: the jobs' dimensions (pairs, prompt chunks, deltas, the pairs of each table and
  figure), built once the config is valid.
- ``generate_args`` / ``prefix_args``: the options of ``specrej generate`` / ``score-prefixes``
  per job (the CLI's flags, checked against ``specrej.cli.main.build_parser`` by the tests).
- ``failed_prompts_message`` / ``out_of_range_messages``: what ``onsuccess`` prints.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
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
    config["results_dir"] = os.path.normpath(config["results_dir"])  # "results/grid/" names the same folder
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
    from specrej.records.io import read_prompts  # torch-free

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
        # Figure 4: the pair named, else every studied pair (one row of panels each)
        chosen = config["figures"]["figure4"]["pair"]
        self.figure4_pairs = [chosen] if chosen else list(self.correlation_pairs)


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
            runs[(method.name, method.setting_name(method.check(params)))] = {"spec": entry["name"],
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
    args = common_args(config, pair, "sr-adaptive" if delta is not None else method, seed_offset)
    block = config["bon"] if method == "bon" else config["sr"]
    if method == "bon":
        args += ["--n", n]
    else:
        args += ["--alpha", alpha, "--min-tokens", block["min_tokens"], "--max-init-batch", block["max_init_batch"]]
        if decision_tokens:
            args += ["--decision-tokens", ",".join(map(str, decision_tokens))]
        if delta is not None:
            args += ["--delta", delta] + (["--fit", fit] if fit else [])
    if block["batch_size"]:
        args += ["--batch-size", min(block["batch_size"], n) if method == "bon" else block["batch_size"]]
    if block["memory_budget"] or config["memory_budget"]:
        args += ["--memory-budget", block["memory_budget"] or config["memory_budget"]]
    return join_args(args + remote_code_args(config, pair))


def common_args(config: dict, pair: dict, method: str, seed_offset: int = 0) -> list:
    """The options every generation job of `pair` shares: models, method, sampling, device, dtype."""
    g, r, s = config["generators"][pair["generator"]], config["rewards"][pair["reward"]], config["sampling"]
    # --prompt-format only when it is not the CLI's default (auto): the jobs of configs that leave
    # it out keep their options, so their finished runs are not redone
    prompt_format = ["--prompt-format", g["prompt_format"]] if g["prompt_format"] != "auto" else []
    return ["--model", g["model"], "--reward", r["model"], "--method", method, *prompt_format,
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


# --------------------------------------------------------------------------------------
# before a run: what `onstart` prints (the study's jobs and about how long they take)
# --------------------------------------------------------------------------------------

# Seconds measured on 2026-12-01: `make study` on a fresh clone of 78080d0 (config/config.yaml:
# SmolLM2-135M-Instruct in bfloat16, 24 prompts, 64 new tokens) on the 2-core CI machine, two jobs
# at a time, 27 min 11 s for its 45 jobs; each job's seconds from results/benchmarks/*.tsv, its
# generation seconds from its records' timing.total_s.
GENERATION_START_S = 5.9  # a generation job's seconds beyond its records': loading the model (5.0-6.9 s)
BON_CANDIDATE_STEP_S = 5.81e-3  # Best-of-N per prompt x candidate x new token: 142.8 s per shard of 16
METHOD_STEP_S = {  # the other methods per prompt x new token, at the default's settings (mean)
    "sr": 0.139,  # b_init 128: 191.7-229.3 s at alpha 0.9-0.5
    "sr-random": 0.138,  # 189.2-237.3 s
    "st-bon": 0.081,  # 106.0 s at N=32, 142.7 s at N=128
}
SCORE_PREFIXES_S = 4.2  # one chunk's prefixes under the log-prob reward
FETCH_MODEL_S = 31.0  # the default model's fetch and conversion, first use
JUDGE_COMPARISON_S = 0.52  # Table 1's local judge (local:default): 142.3 s for 11 methods x 24 prompts
ANALYSIS_JOB_S = 0.94  # the mean of the other 25 jobs (merges, statistics, tables, figures)
SNAKEMAKE_JOB_S = 3.3  # per job, Snakemake's own time and the report: (1631 s - 2962 s / 2) / 45
MEASURED_CORES = 2


def study_jobs(config: dict, jobs: Plan) -> list[dict]:
    """Every job of the whole study from an empty results folder, as the rules wire them (rule
    `all` included): {"rule"}, and for a generation job "prompts" and "method" (Best-of-N:
    "bon" and its "candidates")."""
    out = [{"rule": rule} for rule in ("prepare_prompts", "all", "runs_table", "method_summary", "decisions",
                                       "win_rates", "table1", "table2", "figure2", "figure3", "figure4",
                                       "correlation_summary", "headline")]
    out += [{"rule": "fetch_model"} for _ in study_models(config)]
    out += [{"rule": "prompt_chunk"} for _ in jobs.all_chunks]
    # the correlation study's pairs, and any pair Figure 2 or 4 shows beside them
    studied = [p for p in dict.fromkeys([*jobs.correlation_pairs, jobs.figure2_pair, *jobs.figure4_pairs]) if p]
    adaptive, fitted = jobs.adaptive_deltas, bool(jobs.adaptive_deltas and jobs.calibration_chunks)
    out += _bon_jobs(config, jobs, studied, fitted)
    for pair in jobs.pairs:
        out += [{"rule": "merge_bon"} for _ in config["bon"]["n"]]
        for method, _ in method_settings(config):
            out += [{"rule": "merge_method"}] + [{"rule": "method_run", "method": method, "prompts": len(chunk)}
                                                 for chunk in jobs.chunks.values()]
        for _ in adaptive:
            out += [{"rule": "merge_sr_adaptive"}] + [{"rule": "sr_adaptive", "method": "sr", "prompts": len(chunk)}
                                                      for chunk in jobs.chunks.values()]
        out += [{"rule": "score_prefixes"} for _ in (jobs.chunks if pair in studied else {})]
        if fitted:  # the held-out prompts' prefix scores, and the fit from them
            out += [{"rule": "score_prefixes"} for _ in jobs.calibration_chunks] + [{"rule": "calibration_fit"}]
    out += [{"rule": "correlation_statistics"} for _ in studied]
    out += [{"rule": "adaptive_survival"} for _ in (jobs.correlation_pairs if fitted else [])]
    return out


def _bon_jobs(config: dict, jobs: Plan, studied: list[str], fitted: bool) -> list[dict]:
    """The Best-of-N generation jobs: per pair and chunk each shard or direct run that a Bo-N,
    the correlation study (its first correlation.n) or adaptive SR's held-out fit reads."""
    out = []
    for pair in jobs.pairs:
        needs = [(jobs.chunks, n) for n in config["bon"]["n"]]
        needs += [(jobs.chunks, config["correlation"]["n"])] if pair in studied else []
        needs += [(jobs.calibration_chunks, config["correlation"]["n"])] if fitted else []
        runs = {(name, len(chunk), *run) for chunks, n in needs for name, chunk in chunks.items()
                for run in _bon_runs(config, n)}  # a shard read by several Bo-N is one job
        out += [{"rule": rule, "method": "bon", "prompts": prompts, "candidates": candidates}
                for _, prompts, rule, _, candidates in sorted(runs)]
    return out


def _bon_runs(config: dict, n: int) -> list[tuple[str, int, int]]:
    """(rule, shard k or N, candidates) of each Best-of-N run of a chunk that makes Bo-n."""
    kind, count = bon_sources(config, n)
    if kind == "shards":
        return [("bon_shard", k, config["bon"]["shard_size"]) for k in range(count)]
    return [("bon_direct", n, n)]


def job_seconds(config: dict, job: dict, comparisons: int) -> float:
    """About how long one job of `study_jobs` takes on the measured 2-core CPU, two jobs at a
    time (the constants above); `comparisons`: how many response pairs Table 1's judge reads."""
    steps = job.get("prompts", 0) * config["sampling"]["max_new_tokens"]
    if job["rule"] in ("bon_shard", "bon_direct"):
        return GENERATION_START_S + steps * job["candidates"] * BON_CANDIDATE_STEP_S
    if job["rule"] in ("method_run", "sr_adaptive"):  # a method from outside the project: at SR's rate
        return GENERATION_START_S + steps * METHOD_STEP_S.get(job["method"], METHOD_STEP_S["sr"])
    if job["rule"] == "win_rates" and local_judge(config):
        return GENERATION_START_S + comparisons * JUDGE_COMPARISON_S
    return {"score_prefixes": SCORE_PREFIXES_S, "fetch_model": FETCH_MODEL_S, "all": 0.0}.get(
        job["rule"], ANALYSIS_JOB_S)


def study_seconds(config: dict, jobs: Plan) -> float:
    """About how long the whole study takes on the measured 2-core CPU: its jobs' seconds two
    at a time, plus Snakemake's own time per job."""
    planned = study_jobs(config, jobs)
    runs = len(config["bon"]["n"]) + len(method_settings(config)) + len(jobs.adaptive_deltas)
    prompts = sum(map(len, jobs.chunks.values()))
    comparisons = len(jobs.table1_pairs) * prompts * (runs - 1)  # Table 1: every run against Bo-N_min
    return (sum(job_seconds(config, job, comparisons) for job in planned) / MEASURED_CORES
            + SNAKEMAKE_JOB_S * len(planned))


GENERATION_RULES = ("bon_shard", "bon_direct", "method_run", "sr_adaptive")


def study_overview(config: dict, jobs: Plan, jobs_left: int | None = None) -> str:
    """What the study runs and about how long it takes, in three lines (four when `jobs_left`,
    Snakemake's count of the jobs this run has left, is below the study's)."""
    planned = study_jobs(config, jobs)
    generating = sum(job["rule"] in GENERATION_RULES for job in planned)
    pairs = [pair_labels(config, pair)["pair"] for pair in jobs.pairs.values()]
    shown = ", ".join(pairs) if len(pairs) <= 4 else f"{', '.join(pairs[:3])} and {len(pairs) - 3} more"
    prompts = sum(map(len, jobs.chunks.values()))
    held_out = f" (+ {len(calibration_select(config))} held out for adaptive SR's fit)" if jobs.calibration_chunks \
        else ""
    larger = {generator["model"] for generator in config["generators"].values()} != {"default"}
    lines = [(f"specrej: the study: {len(planned)} jobs ({generating} of them generating), "
              f"{_count(len(pairs), 'pair')} ({shown}), {prompts} prompts{held_out}, up to "
              f"{config['sampling']['max_new_tokens']} new tokens per response"),
             f"specrej:   {'; '.join(_method_summaries(config, jobs))}",
             (f"specrej:   about {_duration(study_seconds(config, jobs))} from an empty {config['results_dir']}/ on "
              f"a 2-core CPU (SmolLM2-135M's per-job times, measured 2026-12-01"
              f"{'; larger models take longer' if larger else ''}); a GPU is faster")]
    if jobs_left is not None and jobs_left < len(planned):
        lines.append(f"specrej:   this run has {jobs_left} of them left (finished jobs are kept), so it takes less")
    return "\n".join(lines)


def _method_summaries(config: dict, jobs: Plan) -> list[str]:
    """Best-of-N's ladder, then each method's settings by their labels."""
    from specrej.methods import get_method

    shard = config["bon"]["shard_size"]
    ladder = f"Best-of-N {', '.join(map(str, sorted(config['bon']['n'])))}" + (f" (shards of {shard})" if shard else "")
    by_method = {}
    for (name, _), run in method_settings(config).items():
        method = get_method(run["spec"])
        by_method.setdefault(name, []).append(method.label(method.check(run["params"])))
    adaptive = [f"SR δ={fmt_alpha(delta)}" for delta in jobs.adaptive_deltas]
    return [ladder] + [_compact(labels) for labels in [*by_method.values(), adaptive] if labels]


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
    minutes = seconds / 60
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours = minutes / 60
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"
