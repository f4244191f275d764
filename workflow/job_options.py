"""Each job's engine options and resources, from the validated config.

- ``reference_args`` / ``method_args``: the options of ``specrej generate`` for a Best-of-N job and a
  method_run job (the CLI's own flags and ``--param NAME=VALUE``, checked against
  ``specrej.cli.main.build_parser`` by the tests); ``prefix_args``: ``specrej score-prefixes``';
  ``compile_args``: ``specrej compile``'s, for a generator that ``builds_graphs``; ``calibrate_args``:
  ``specrej calibrate``'s, for a pair's calibration job.
- ``partial_path``: the file the engine writes while a job runs.
- ``needs_gpu`` / ``judge_resources``: what a scheduler places a job by (config `resources`).
- ``method_source`` / ``method_code``: what identifies a method's code (a method_run job's
  input and params, so a changed method reruns).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from method_entries import reference
from specrej.rewards import GENERATOR_REWARDS  # torch-free
from plan import local_judge, model_name


def join_args(args) -> str:
    """One shell-quoted string (shlex.split gives the list back)."""
    return " ".join(shlex.quote(str(a)) for a in args)


def common_args(config: dict, pair: dict, method: str, seed_offset: int = 0) -> list:
    """The options every generation job of `pair` shares: models, method, sampling, device, dtype."""
    g, r, s = config["generators"][pair["generator"]], config["rewards"][pair["reward"]], config["sampling"]
    # --prompt-format only when it is not the CLI's default (auto): the jobs of configs that leave
    # it out keep their options, so their finished runs are not redone
    prompt_format = ["--prompt-format", g["prompt_format"]] if g["prompt_format"] != "auto" else []
    compile_step = ["--compile", compile_setting(g)] if compile_setting(g) != "auto" else []  # likewise
    return ["--model", g["model"], *revision_args("model", g), "--reward", r["model"], *revision_args("reward", r),
            "--method", method, *prompt_format, *compile_step,
            "--max-new-tokens", s["max_new_tokens"], "--temperature", s["temperature"], "--top-p", s["top_p"],
            "--top-k", s["top_k"], "--seed", s["seed"] + seed_offset, "--device", config["device"],
            "--dtype", generator_dtype(config, g), "--reward-batch-size", r["batch_size"], "--no-progress",
            "--exit-zero"]  # a chunk whose every prompt fails is a result (error records), not a failed job


def compile_setting(generator: dict) -> str:
    """A generator entry's `compile`: auto, on or off (YAML reads a bare on / off as true / false)."""
    return {True: "on", False: "off"}.get(generator["compile"], generator["compile"])


def generator_dtype(config: dict, generator: dict) -> str:
    """A generator entry's dtype, else the study's."""
    return generator["dtype"] or config["dtype"]


def builds_graphs(config: dict, generator: str) -> bool:
    """Whether a job builds `generator`'s compiled graphs before its generation jobs (rule
    compiled_graphs): under compile auto with build_graphs, and not for a model that runs its own code."""
    g = config["generators"][generator]
    return compile_setting(g) == "auto" and g["build_graphs"] and not g["trust_remote_code"]


def graphs_name(config: dict, generator: str) -> str:
    """The name of `generator`'s compiled_graphs job and its output: one per model and dtype, so
    generators that share both share one build (and one measurement, not two taken side by side)."""
    g = config["generators"][generator]
    return f"{model_name(g['model'])}--{generator_dtype(config, g)}"


# the compiled step's row ranges (specrej.engine.compiled.ALL_RANGES) by the rows each is built and
# measured at: one compiled_graphs job each
GRAPH_ROWS = {"1": 1, "2-64": 16, "65-": 128}


def graph_rows(largest_rows: int | None = None) -> list[int]:
    """The rows of the compiled_graphs jobs that a generation job waits on: those of the ranges at or
    below `largest_rows` (rows only shrink: finished rows leave the batch), every range where a job's
    largest batch is not known before it runs (None)."""
    return [rows for name, rows in GRAPH_ROWS.items()
            if largest_rows is None or int(name.partition("-")[0]) <= largest_rows]  # a range's first row


def compile_args(config: dict, generator: str, rows: int) -> str:
    """`specrej compile` options of the compiled_graphs job of `generator`'s row range at `rows` (all
    but --threads and --out): built and measured once per machine (--if-missing), at the generation
    jobs' dtype and device. Eager against compiled is timed over 8 steps, twice (not 32, three
    times): generation jobs wait on this job, and the choice it makes (compiled 1.1-1.7x faster on
    the CPUs measured) does not need more."""
    g = config["generators"][generator]
    return join_args(["--model", g["model"], *revision_args("model", g), "--dtype", generator_dtype(config, g),
                      "--device", config["device"], "--rows", rows, "--tokens", 8, "--repeats", 2, "--if-missing"])


def calibrate_args(config: dict, pair: dict) -> str:
    """`specrej calibrate` options of `pair`'s calibration job (all but --threads and --out): its
    generator as the generation jobs run it (dtype, device, compile) and its reward's scoring (not
    a reward model that runs its own code), on the config's `calibration` grid, measured once per
    machine (--if-missing)."""
    g, r, grid = config["generators"][pair["generator"]], config["rewards"][pair["reward"]], config["calibration"]
    reward = [] if r["trust_remote_code"] else ["--reward", r["model"]]
    return join_args(["--model", g["model"], *revision_args("model", g), "--dtype", generator_dtype(config, g),
                      "--device", config["device"], "--compile", compile_setting(g), *reward,
                      "--rows", _text(grid["rows"]), "--contexts", _text(grid["contexts"]),
                      "--steps", grid["steps"], "--min-seconds", grid["min_seconds"], "--repeats", grid["repeats"],
                      *(["--samplers", ",".join(grid["samplers"])] if grid["samplers"] else []), "--if-missing"])


def revision_args(model: str, entry: dict) -> list:
    """--model-revision / --reward-revision (`model`: "model" or "reward") when the generator's or
    reward's entry pins a `revision`; nothing otherwise, so the jobs of configs without one keep
    their options."""
    return [f"--{model}-revision", entry["revision"]] if entry.get("revision") is not None else []


def trust_args(*, model: bool, reward: bool) -> list:
    """--trust-remote-code for exactly the models whose entries allow their own code: the
    generator (model), the reward model (reward) or both; nothing for neither."""
    trusted = [name for name, allowed in (("model", model), ("reward", reward)) if allowed]
    return ["--trust-remote-code", "both" if len(trusted) == 2 else trusted[0]] if trusted else []


def remote_code_args(config: dict, pair: dict) -> list:
    g, r = config["generators"][pair["generator"]], config["rewards"][pair["reward"]]
    return trust_args(model=g["trust_remote_code"], reward=r["trust_remote_code"])


def reference_args(config: dict, pair: dict, *, n: int, seed_offset: int = 0) -> str:
    """`specrej generate` options of one job of the reference method (Best-of-N) of `pair`: N = `n`
    (everything but --prompts/--out), quoted into one string (a job's `params.args`: a changed string
    reruns the job). A batch size in its entry is capped at `n`."""
    ref = reference(config)
    args = common_args(config, pair, ref["name"], seed_offset) + ["--n", n]
    for key, value in ref["params"].items():
        args += ["--param", f"{key}={min(value, n) if key == ref['batch_param'] else _text(value)}"]
    budget = ref["memory_budget"] or config["memory_budget"]
    if budget:
        args += ["--memory-budget", budget]
    return join_args(args + remote_code_args(config, pair))


def method_args(config: dict, pair: dict, spec: str, params: dict, memory_budget: str | None = None) -> str:
    """`specrej generate` options of one method setting's job: the common ones, `--method SPEC`,
    then its `params` (its entry's grid values, the fit file), each as --param NAME=VALUE, and the
    entry's `memory_budget`, else the top-level one."""
    args = common_args(config, pair, spec)
    for key, value in params.items():
        args += ["--param", f"{key}={_text(value)}"]
    budget = memory_budget or config["memory_budget"]
    if budget:
        args += ["--memory-budget", budget]
    return join_args(args + remote_code_args(config, pair))


def _text(value) -> str:
    """A parameter's value as --param takes it: a list as 8,16."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def partial_path(results: str, output: str, args: str, prompts_digest: str) -> str:
    """Where the engine writes while a job runs (moved onto the output when it finishes): a
    killed job leaves it behind and the rerun resumes it; its name carries a digest of the
    settings and of the chunk's prompts (`plan.chunk_params`' digest), so a rerun with other
    settings or edited prompts never appends to it."""
    digest = hashlib.sha256(f"{args} {prompts_digest}".encode()).hexdigest()[:12]
    return f"{results}/.partial/{Path(output).relative_to(results)}.{digest}.jsonl"


def prefix_args(config: dict, pair: dict) -> list[str]:
    """`specrej score-prefixes` options for `pair` (everything but --trajectories/--out)."""
    g, r = config["generators"][pair["generator"]], config["rewards"][pair["reward"]]
    taus = ",".join(map(str, sorted(config["correlation"]["decision_tokens"])))
    args = ["--reward", r["model"], *revision_args("reward", r), "--decision-tokens", taus,
            "--device", config["device"], "--dtype", r["dtype"] or config["dtype"],
            "--reward-batch-size", r["batch_size"], "--no-progress"]
    scores_text = r["model"] not in GENERATOR_REWARDS  # only then is the generator's tokenizer loaded
    if scores_text:
        args += ["--model", g["model"], *revision_args("model", g)]
    args += trust_args(model=scores_text and g["trust_remote_code"], reward=r["trust_remote_code"])
    return [str(a) for a in args]


def needs_gpu(config: dict, pair: dict, step: str) -> int:
    """GPUs for a job of `step` ('generate' or 'score_prefixes'): none for the prefix scores of a
    reward that reads the recorded numbers (logprob, self-certainty)."""
    if step == "score_prefixes" and config["rewards"][pair["reward"]]["model"] in GENERATOR_REWARDS:
        return 0
    return config["resources"][step]["gpu"]


def judge_resources(config: dict) -> dict:
    """The win-rate job's threads, gpu, mem_mb and runtime: resources.evaluate for a local model
    judge; for no judge, `longest` or the API judge, an analysis job's, without a GPU."""
    if local_judge(config):
        return dict(config["resources"]["evaluate"])
    return {**config["resources"]["analysis"], "gpu": 0}


def method_source(spec: str) -> str | None:
    """The source file of a ``python:module:attribute`` method's module (None for a built-in
    method, or a module without a file)."""
    if not spec.startswith("python:"):
        return None
    import importlib.util

    found = importlib.util.find_spec(spec.removeprefix("python:").partition(":")[0])
    origin = found.origin if found is not None else None
    return origin if origin and Path(origin).is_file() else None


def method_code(spec: str) -> str:
    """What identifies a method's code, for the generation jobs' params (a change reruns them, as
    a changed parameter does): the value the run's records keep (`registry.method_code`): the
    digest of its module's content for a method from outside the package, the installed specrej
    version for a built-in one."""
    from specrej.methods.registry import package_code, sources_code

    source = method_source(spec)
    return sources_code([source]) if source is not None else package_code()
