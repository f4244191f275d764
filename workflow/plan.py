"""The workflow's plain Python: the config's checks and the jobs' dimensions.

workflow/rules/common.smk imports this module (and `job_options`, `messages`) and keeps only
what needs Snakemake. Everything here is a function of the config dict:

- ``validate_config``: ``snakemake.utils.validate`` against the schema (filling its defaults),
  then what a schema cannot express (references between keys, paths on disk, each method's
  declared parameters); any problem is one ``ConfigError`` line naming the key.
- ``Plan``: the jobs' dimensions (pairs, prompt chunks, method settings, the pairs of each table
  and figure), built once the config is valid.
- the accuracy study's part (problem sets, the runs and ladder its analysis reads): ``answers_plan``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from answers_plan import REASONING_GYM, answer_fields, check_problems, problem_set_lines
from method_entries import (calibration_select, check_calibration_samplers, check_methods, fit_entry, method_settings,
                            old_blocks_message, reference)
from specrej.rewards import GENERATOR_REWARDS  # torch-free

LOCAL_SUFFIXES = (".json", ".jsonl", ".txt")


class ConfigError(ValueError):
    """An invalid config: the message starts with "invalid config: " and names the key."""


# -- config validation: the schema (one readable line per problem), then the cross-checks --


def validate_config(config: dict, schema_path, basedir=".") -> None:
    """Validate `config` with ``snakemake.utils.validate(config, schema, set_default=True)``
    (the schema's defaults are filled in place), then cross-check it (`basedir`: the workflow's
    folder, where a relative prompt file is also looked for)."""
    import jsonschema
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    old = old_blocks_message(config)
    if old:
        raise ConfigError(old)
    try:
        validate(config, str(Path(schema_path).resolve()), set_default=True)
    except WorkflowError as error:
        cause = error.__context__  # validate raises its WorkflowError while handling jsonschema's error
        if not isinstance(cause, jsonschema.ValidationError):
            raise
        where = key_path(cause.absolute_path) or "(top level)"
        raise ConfigError(f"invalid config: {where}: {schema_message(cause)}") from None
    config["results_dir"] = os.path.normpath(config["results_dir"])  # "results/grid/" names the same folder
    method_problems = list(check_methods(config))
    problems = [*cross_check(config, basedir, not method_problems), *check_paths(config, basedir), *method_problems]
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))


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
        return f"{error.instance!r} is not valid: expected {' '.join(expected.split())}"
    return error.message


def cross_check(config: dict, basedir=".", methods_valid: bool = True):
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
    shard = reference(config)["shard_size"] if methods_valid else None
    n = config["correlation"]["n"]
    if shard and n > shard and n % shard:
        yield (f"correlation.n: {n} must be a multiple of the reference's shard_size={shard} (the study reads "
               "its first n / shard_size shards)")
    figures = config["figures"]
    for key, value in (("correlation.pairs", config["correlation"]["pairs"]),
                       ("figures.figure2.pair", figures["figure2"]["pair"]),
                       ("figures.figure4.pair", figures["figure4"]["pair"])):
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
    yield from check_problems(config)
    yield from check_calibration_samplers(config)
    select = config["prompts"]["select"]
    calibration = calibration_select(config) or None
    if calibration is not None:
        overlap = sorted(set(calibration) & set(select)) if select is not None else calibration
        if overlap:
            where = f"methods[{config['methods'].index(fit_entry(config))}].calibration_prompts"
            yield (f"{where}: {', '.join(map(str, overlap))} "
                   + ("are also in prompts.select" if select is not None else "are study prompts (prompts.select "
                      "is null: every prompt)")
                   + ": the fit must come from held-out prompts, or it would be tested on its own data")


def check_paths(config: dict, basedir="."):
    """Yield one message per config key naming a path that cannot serve: `results_dir` where a
    file stands, a local `prompts.source` that is missing or not a file, a dataset without rows."""
    results = Path(config["results_dir"])
    blocking = next((p for p in [results, *results.parents] if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        under = f" (results_dir {results} lies under it)" if blocking != results else ""
        yield f"results_dir: {blocking} is a file, not a folder{under}"
    source = config["prompts"]["source"]
    local = local_source(source, basedir)
    if source == REASONING_GYM:
        pass  # no file: the problems are generated (check_problems)
    elif local is None:
        if config["prompts"]["select"] is None:
            yield (f"prompts.source {source!r} is a Hugging Face dataset: give prompts.select (the row indices) "
                   "so the jobs can be planned before it is downloaded")
    elif Path(local).is_dir():
        yield f"prompts.source: {source} is a folder, not a .json, .jsonl or .txt file"
    elif not Path(local).is_file():
        yield f"prompts.source: file not found: {source}"


def local_source(source: str, basedir=".") -> str | None:
    """The path of a local prompt file (relative to the working directory, else to `basedir`,
    the workflow's folder), or None for a Hugging Face dataset spec or the reasoning-gym source."""
    if source == REASONING_GYM:
        return None
    path = Path(source)
    if not path.exists() and not path.is_absolute() and (Path(basedir) / path).exists():
        return str(Path(basedir) / path)
    return source if path.exists() or source.endswith(LOCAL_SUFFIXES) else None


# -- prompts: ids known at planning time, split into chunks (one generation job per chunk) --


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))[:60] or "_"


def prepared_select(config: dict) -> list[int] | None:
    """The rows results/prompts/prompts.jsonl holds: the study's, then the held-out ones."""
    select = config["prompts"]["select"]
    return None if select is None else [*select, *calibration_select(config)]


def plan_prompts(config: dict, select=None, basedir=".") -> list[tuple]:
    """[(prompt_id, prompt text or None)] of rows `select` (default: the study's), in order; the
    texts are None for a Hugging Face dataset (not downloaded to plan). A prompt with a reference
    answer (a reasoning-gym problem, or a prompts file's line with `answer`) has a third element,
    its answer fields, so that a changed answer reruns its chunk as a changed text does."""
    source = config["prompts"]["source"]
    select = config["prompts"]["select"] if select is None else select
    if source == REASONING_GYM:
        items = [(line["prompt_id"], line["prompt"], answer_fields(line))
                 for line in problem_set_lines(config["prompts"]["problems"])]
        where = f"the problem set has {len(items)} problems"
    else:
        local = local_source(source, basedir)
        if local is None:
            return [(index, None) for index in select]
        from specrej.errors import SpecrejError
        from specrej.records.prompts import read_prompts  # torch-free

        try:
            items = [(item.prompt_id, item.prompt, *([answer_fields(item.key)] if item.key else []))
                     for item in read_prompts(local)]
        except SpecrejError as error:
            raise ConfigError(f"invalid config: prompts.source: {error}") from None
        where = f"{local} has {len(items)} prompts"
    if select is not None:
        out_of_range = [i for i in select if i >= len(items)]
        if out_of_range:
            raise ConfigError(f"invalid config: prompts.select: indices {out_of_range} are out of range ({where})")
        items = [items[i] for i in select]
    return items


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
    # a prompt with an answer adds its answer fields (plan_prompts); one without keeps the digest it had
    digest = hashlib.sha256(json.dumps([[str(i), *rest] for i, *rest in group], sort_keys=True,
                                       default=str).encode()).hexdigest()[:16]
    return {"ids": [i for i, *_ in group], "digest": digest}


# -- pairs, methods and the run files --


def pair_name(pair: dict) -> str:
    return f"{pair['generator']}--{pair['reward']}"


def label(config: dict, kind: str, key: str) -> str:
    """The display name of generators[key] or rewards[key] (`kind`): its label, else the key."""
    return config[kind][key].get("label") or key


def pair_labels(config: dict, pair: dict) -> dict[str, str]:
    """Display names of a pair ({'generator': ..., 'reward': ...}): generator, reward, and
    'generator / reward'."""
    g, r = label(config, "generators", pair["generator"]), label(config, "rewards", pair["reward"])
    return {"generator": g, "reward": r, "pair": f"{g} / {r}"}


def reference_sources(config: dict, n: int) -> tuple[str, int]:
    """How the reference's run of N is made: ('shards', k) merges shards 0..k-1; ('direct', n) is one run of N."""
    shard = reference(config)["shard_size"]
    if shard and n >= shard:
        return "shards", n // shard
    return "direct", n


def calibration_fit_file(results: str, pair: str) -> str:
    """The held-out prefix table that adaptive SR of `pair` fits on (rule calibration_fit)."""
    return f"{results}/adaptive/{pair}/calibration_prefixes.parquet"


def fit_label(entry: dict) -> str:
    """The display name of the method that fits on held-out prompts (its `Display.name`, else its name)."""
    from specrej.methods import get_method

    method = get_method(entry["name"])
    return method.display.name if method.display else method.name


def merged_runs(config: dict, results: str, pairs) -> list[str]:
    """The per-pair run files the metrics read, in their tables' order: the reference's for every
    N, every setting of the other entries, then those of the entry fitting on held-out prompts
    (each group pair by pair), a setting only for the pairs of the rewards its entry names (`rewards`)."""
    runs, settings, ref = f"{results}/runs", method_settings(config), reference(config)
    fitting = fit_entry(config)
    fitted = [key for key, run in settings.items() if fitting and run["spec"] == fitting["name"]]
    groups = [[key for key in settings if key not in fitted], fitted]
    reward_of = {pair_name(p): p["reward"] for p in config["pairs"]}
    return [f"{runs}/{p}/{ref['directory']}/n{n}.jsonl" for p in pairs for n in ref["ladder"]] + [
        f"{runs}/{p}/{method}/{setting}.jsonl" for group in groups for p in pairs for method, setting in group
        if settings[(method, setting)]["rewards"] is None or reward_of[p] in settings[(method, setting)]["rewards"]]


def merged_method_runs(config: dict, results: str, pairs) -> list[str]:
    """`merged_runs` less the reference's ladder (runs/<pair>/<reference>/n<N>.jsonl)."""
    ref = reference(config)
    ladder = {f"{results}/runs/{p}/{ref['directory']}/n{n}.jsonl" for p in pairs for n in ref["ladder"]}
    return [path for path in merged_runs(config, results, pairs) if path not in ladder]


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
        fitting = fit_entry(config)
        self.adaptive_deltas = sorted(fitting["grid"].get("delta", [])) if fitting else []
        self.fit_label = fit_label(fitting) if fitting else None
        self.reference = reference(config)
        self.method_runs = method_settings(config)
        pairs = config["correlation"]["pairs"]
        self.correlation_pairs = list(self.pairs) if pairs is None else list(pairs)
        table1 = config["tables"]["table1_reward"] or config["pairs"][0]["reward"]
        self.table1_pairs = [p for p in self.pairs if self.pairs[p]["reward"] == table1]
        table2 = config["tables"]["table2_reward"]
        table2 = table2 if isinstance(table2, list) else [table2]
        self.table2_pairs = [p for p in self.pairs if self.pairs[p]["reward"] in table2]
        first = self.correlation_pairs[0] if self.correlation_pairs else None
        self.figure2_pair = config["figures"]["figure2"]["pair"] or first
        # Figure 4: the pair named, else every studied pair (one row of panels each)
        chosen = config["figures"]["figure4"]["pair"]
        self.figure4_pairs = [chosen] if chosen else list(self.correlation_pairs)
        # the accuracy study (workflow/rules/answers.smk): when study prompts have reference answers
        prompts = [prompt for chunk in self.chunks.values() for prompt in chunk]
        self.answers = any(len(prompt) > 2 and prompt[2]["answer"] is not None for prompt in prompts)
        # the reasoning-gym problem set's digest (rule problem_set writes it; a change reruns it); None for a file
        self.problem_set = (problem_set_lines(config["prompts"]["problems"])[0]["problem_set"]
                            if config["prompts"]["source"] == REASONING_GYM else None)


# -- models: each one the study loads is fetched and prepared once, by a job of its own --


def model_name(spec: str) -> str:
    """A file name for the fetch job of model `spec`: readable, and distinct per spec."""
    readable = _slug(Path(spec).name or spec)
    return f"{readable}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def reward_model_spec(spec: str) -> str | None:
    """The model behind reward `spec`, or None for the rewards that are not models."""
    return None if spec in GENERATOR_REWARDS or spec.startswith("python:") else spec


def local_judge(config: dict) -> bool:
    """Whether Table 1's judge is a local model: `local:<model>`, or `auto` (`local:default`)."""
    judge = config["evaluation"]["judge"]
    return judge == "auto" or (judge is not None and judge.startswith("local:"))


def judge_availability(config: dict) -> str:
    """What Table 1's judge lacks here, if anything (`analysis.judge_registry.judge_availability`)."""
    from analysis.judge_registry import judge_availability  # standard library only

    return judge_availability(config["evaluation"]["judge"])


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


# rules renamed when the workflow stopped naming a built-in method: a profile written for the old
# names is told the new ones
RENAMED_RULES = {"bon_shard": "reference_shard", "bon_direct": "reference_direct", "merge_bon": "merge_reference"}


def unknown_rule_settings(settings: dict[str, Iterable[str]], rules: Iterable[str]) -> str | None:
    """One line naming every rule that `settings` ({"set-resources": rule names, "set-threads": rule
    names}, from a profile or the command line) gives resources or threads and this workflow does
    not have (Snakemake ignores them: a GPU job would quietly go to the default partition); None
    when every name is a rule."""
    known = set(rules)
    unknown = {name: option for option, names in settings.items() for name in names if name not in known}
    if not unknown:
        return None
    named = ", ".join(f"{name} ({option}" + (f"; now {RENAMED_RULES[name]})" if name in RENAMED_RULES else ")")
                      for name, option in sorted(unknown.items()))
    return f"the profile or command line sets resources or threads for rules this workflow does not have: {named}"
