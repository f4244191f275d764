"""The Python API behind `specrej generate`: load once, run a prompt file, append records."""

from __future__ import annotations

import gc
import hashlib
import numbers
import os
import warnings
from collections.abc import Iterator, Sequence

import torch
from tqdm.auto import tqdm

from .algorithms import BatchOutOfMemory, Result
from .engine import Engine
from .errors import SpecrejError
from .methods import Method, file_digest, get_method, settings_digest
from .io import PromptItem, RecordWriter, read_prompts
from .models import load_generator
from .rewards import Response, Reward
from .sampling import SamplingParams, check_int, shown


def load_engine(model: str = "default", *, dtype: str = "auto", device: str = "auto",
                trust_remote_code: bool = False, prompt_format: str = "auto") -> Engine:
    """The generator `model` loaded, its prompts rendered as `prompt_format` says (auto, chat or
    plain: `Engine.PROMPT_FORMATS`); "chat" for a tokenizer without a chat template is refused."""
    check_prompt_format(prompt_format)
    engine = Engine(*load_generator(model, dtype, device, trust_remote_code))
    engine.prompt_format = prompt_format
    if prompt_format == "chat" and not engine.tokenizer.chat_template:
        raise SpecrejError(f"--prompt-format chat: the tokenizer of {model} has no chat template (use plain, or "
                           "auto, which is plain for it)")
    return engine


def check_prompt_format(prompt_format: str) -> None:
    if prompt_format not in Engine.PROMPT_FORMATS:
        raise SpecrejError(f"--prompt-format must be one of {', '.join(Engine.PROMPT_FORMATS)}, got "
                           f"{shown(prompt_format)}")


def prompt_seed(seed: int, prompt_id) -> int:
    """A seed per prompt, stable under resume and reordering, and distinct across prompts."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()[:8], "little") >> 1


def resolve_method(method: str | Method, rejection: str = "alpha") -> Method:
    """The method a name, python:module:attribute or `Method` names; `rejection` "adaptive" with
    "sr" is sr-adaptive (the CLI's --rejection)."""
    if rejection not in ("alpha", "adaptive"):
        raise SpecrejError(f"--rejection must be alpha or adaptive, got {shown(rejection)}")
    if rejection == "adaptive":
        if method != "sr":
            raise SpecrejError(f"--rejection adaptive is for --method sr, got --method {shown(method)}")
        method = "sr-adaptive"
    return method if isinstance(method, Method) else get_method(method)


def method_params(method: Method, given: dict) -> dict:
    """`method`'s parameters from keywords: the given ones (None: not given) over its defaults,
    each checked against its declaration; an iterator (decision tokens) is read once."""
    given = {k: (list(v) if isinstance(v, Iterator) else v) for k, v in given.items() if v is not None}
    return method.resolve(given)


def run_one(engine: Engine, reward: Reward, prompt: str, *, method: str | Method, seed: int = 0,
            sampling: SamplingParams = SamplingParams(), memory_budget: int | None = None,
            measure_memory: bool | None = None, rejection: str = "alpha", **params) -> Result:
    """One prompt with one method and its `params` (Best-of-N: n, batch_size; SR: alpha,
    batch_size, min_tokens, max_init_batch, decision_tokens; sr-adaptive: delta, alpha, fit;
    see each method's declaration). `measure_memory`: see `algorithms.measured_memory` (None: on for
    CUDA, off on CPU unless SPECREJ_MEASURE_MEMORY=1). See `run_loaded` for out-of-memory retries."""
    method = resolve_method(method, rejection)
    return run_loaded(engine, reward, prompt, method, method.kwargs(method_params(method, params)), seed=seed,
                      sampling=sampling, memory_budget=memory_budget, measure_memory=measure_memory)


def run_loaded(engine: Engine, reward: Reward, prompt: str, method: Method, kwargs: dict, *, seed: int,
               sampling: SamplingParams, memory_budget: int | None, measure_memory: bool | None) -> Result:
    """`method.run` on one prompt with its loaded keyword arguments (`Method.kwargs`). Out of
    memory (CUDA, or the host) in a batch of the method's `batch_param` (BoN: the same n in more
    batches; SR: half the initial batch), the prompt is run again from the start with half that
    batch, until a batch of one fails too; `Result.retries` counts the retries and the batch
    that succeeded is in its params. Responses are never cut short to make room."""
    kwargs, retries = dict(kwargs), 0
    while True:
        try:
            result = method.run(engine, reward, prompt, sampling=sampling, seed=seed, memory_budget=memory_budget,
                                measure_memory=measure_memory, **kwargs)
            result.method, result.retries = method.record_method or method.name, retries
            return result
        except BatchOutOfMemory as error:
            failure = error  # leaving the except block drops the failed attempt's frames (its tensors)
        _free_memory(engine.device)
        if method.batch_param is None or not failure.rows or failure.rows <= 1:
            where = "before any row was sampled" if not failure.rows else f"with a batch of {failure.rows}"
            raise SpecrejError(f"out of memory {where} ({failure.detail})")
        kwargs[method.batch_param] = failure.rows // 2
        retries += 1
        warnings.warn(f"out of memory with a batch of {failure.rows} ({failure.detail}); retrying the prompt with "
                      f"{kwargs[method.batch_param]}", stacklevel=2)


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class _ReportedReward:
    """A reward whose own exceptions (a bug in a Python reward, a reward model failing on one
    input) become a SpecrejError naming it: that prompt gets an error record, the others go on."""

    def __init__(self, reward: Reward):
        self.reward, self.name = reward, getattr(reward, "name", type(reward).__name__)

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        try:
            return self.reward.score(prompt, responses)
        except SpecrejError:
            raise
        except Exception as error:  # not BaseException: Ctrl-C still stops the run
            detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            raise SpecrejError(f"reward {self.name} failed: {detail}") from error

    def __getattr__(self, attribute: str):
        return getattr(self.reward, attribute)  # e.g. tokens_processed of a reward model


# the largest --memory-budget taken: 1 EiB, far above any device, so a larger one is a typo
MAX_MEMORY_BUDGET = 2**60


def validate(method: str | Method, n: int | None = None, alpha: float | None = None, *,
             sampling: SamplingParams | None = None, seed: int = 0, memory_budget: int | None = None,
             reward_batch_size: int | None = None, rejection: str = "alpha", **params) -> tuple[Method, dict]:
    """Check every setting before any model loads and return the method with its checked
    parameters: the one check of `specrej generate`'s options (the CLI runs it first) and of
    `run_prompts`' (the same arguments; `reward_batch_size` is the CLI's --reward-batch-size,
    None: not checked). Each message names the CLI option. The method's own parameters (`n`,
    `alpha` and `params`) are checked against its declaration, so a parameter it does not take
    is refused rather than ignored. Every number is range-checked (NaN and +-inf are refused
    wherever a float is taken); any integer --seed is taken (hashed per prompt, `prompt_seed`)."""
    method = resolve_method(method, rejection)
    checked = method_params(method, {"n": n, "alpha": alpha, **params})
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise SpecrejError(f"sampling must be a SamplingParams, got {shown(sampling)}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise SpecrejError(f"--seed must be an integer, got {shown(seed)}")
    if memory_budget is not None:
        if isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Integral):
            raise SpecrejError(f"--memory-budget must be a number of bytes (an integer), got {shown(memory_budget)}"
                               + (" (specrej.budget.parse_size reads sizes such as 2GiB)"
                                  if isinstance(memory_budget, str) else ""))
        if memory_budget < 1:
            raise SpecrejError(f"--memory-budget must be > 0 bytes, got {memory_budget}")
        if memory_budget > MAX_MEMORY_BUDGET:
            raise SpecrejError(f"--memory-budget must be at most 1 EiB ({MAX_MEMORY_BUDGET} bytes), got "
                               f"{shown(memory_budget)}")
    if reward_batch_size is not None:
        check_int(reward_batch_size, "--reward-batch-size", 1)
    return method, checked


def output_settings(method: Method, params: dict, *, model: str, reward: str, seed: int, sampling: SamplingParams,
                    memory_budget: int | None, engine: Engine | None = None, prompt_format: str | None = None) -> dict:
    """Every setting that changes a run file's records: a rerun whose settings differ is refused
    (`io.RecordWriter`). A file parameter counts by its content; the engine's dtype and device
    as loaded (None: not known yet, e.g. before loading); the prompt format as asked for
    (`prompt_format`, else the engine's), left out when it is "auto", so files written before the
    setting existed (all auto) still resume."""
    file_params = {p.name for p in method.params if p.type == "path"}
    prompt_format = prompt_format if prompt_format is not None else getattr(engine, "prompt_format", "auto")
    return {"method": method.name,
            **{f"param.{k}": (file_digest(v) if k in file_params and v else v) for k, v in params.items()},
            "model": model, "reward": reward, "seed": seed, **vars(sampling), "memory_budget": memory_budget,
            **({"prompt_format": prompt_format} if prompt_format != "auto" else {}),
            "dtype": None if engine is None else str(engine.dtype).removeprefix("torch."),
            "device": None if engine is None else engine.device.type}


def count_flops(record: dict, engine: Engine, reward: Reward, prompt: str) -> dict | None:
    """The record's FLOPs from the models' shapes (`flops.record_flops`): the prefill, every
    generated token and every token a reward model scores (none for the log-prob reward; a
    Python reward's own cost is not known and counts 0). None for a model shape it cannot read."""
    from .flops import ModelShape, record_flops

    try:
        generator = ModelShape.from_config(engine.config)
        reward_model = getattr(reward, "model", None)  # a sequence-classification reward model's own network
        reward_shape = None if reward_model is None else ModelShape.from_config(reward_model.config)
        return record_flops(record, generator, reward_shape, len(engine.encode_prompt(prompt)))
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        warnings.warn(f"no FLOP count for this record ({error})", stacklevel=2)
        return None


def run_prompts(prompts: str | os.PathLike | list[PromptItem], out: str | os.PathLike, *, engine: Engine,
                reward: Reward, method: str | Method, model_name: str, reward_name: str, seed: int = 0,
                sampling: SamplingParams = SamplingParams(), memory_budget: int | None = None,
                measure_memory: bool | None = None, progress: bool = True, rejection: str = "alpha",
                **params) -> RecordWriter:
    """Run every prompt not yet in `out` with `method` and its `params` (see `run_one`),
    appending one record per prompt as it finishes.

    A prompt that fails (empty, too long for the model, its reward raised, ...) gets an error
    record and the others go on; the returned (closed) writer's `errors` maps the prompt ids
    that failed, in this run or an earlier one, to their errors. `out` is locked while the run
    writes it (`io.output_lock`), and a rerun with other settings (`output_settings`) is
    refused with the setting that differs. Bad settings raise SpecrejError (`validate`) before
    `out` is opened or a prompt read.

    Each record's params hold the method's setting: {"method", "params", "label"} (the
    configuration key of `analysis`), the setting's keys flat as well (e.g. n, alpha),
    `prompt_format` (how the prompts were rendered: chat or plain, `Engine.used_prompt_format`) and
    `settings_digest`, a digest of `output_settings`.
    """
    method, checked = validate(method, sampling=sampling, seed=seed, memory_budget=memory_budget,
                               rejection=rejection, **params)  # before anything is read or written
    kwargs = method.kwargs(checked)
    items = read_prompts(prompts) if not isinstance(prompts, list) else prompts
    recorded = dict(checked)  # as a record holds them: Param.check gives lists, numbers, strings
    settings = output_settings(method, recorded, model=model_name, reward=reward_name, seed=seed, sampling=sampling,
                               memory_budget=memory_budget, engine=engine)
    family = method.record_method or method.name
    common = {"model": model_name, "reward": reward_name, "seed": seed,
              "prompt_format": engine.used_prompt_format(),  # as the prompts were rendered: chat or plain
              **{key: recorded[key] for key in method.setting_keys}, **vars(sampling),
              "setting": {"method": method.name, "params": recorded, "label": method.label(recorded)},
              "output_settings": settings, "settings_digest": settings_digest(settings)[:16]}
    reward = _ReportedReward(reward)
    with RecordWriter(out, settings) as writer:
        todo = [item for item in items if item.prompt_id not in writer.done]
        bar = tqdm(todo, desc=f"{method.name} {os.path.basename(os.fspath(out))}", unit="prompt",
                   disable=not progress, initial=len(items) - len(todo), total=len(items))
        for item in bar:
            params = {**common, "prompt_seed": prompt_seed(seed, item.prompt_id)}
            try:
                result = run_loaded(engine, reward, item.prompt, method, kwargs, seed=params["prompt_seed"],
                                    sampling=sampling, memory_budget=memory_budget, measure_memory=measure_memory)
            except SpecrejError as error:
                warnings.warn(f"prompt {item.prompt_id}: {error}", stacklevel=2)
                writer.write({"prompt_id": item.prompt_id, "prompt": item.prompt, "method": family,
                              "params": params, "error": str(error)})
                continue
            record = result.to_record(item.prompt_id)
            record["params"] = {**record["params"], **params}
            record["flops"] = count_flops(record, engine, reward, item.prompt)
            writer.write(record)
            if record["best"]:
                bar.set_postfix(best=f"{record['best']['score']:.3g}", s=f"{record['timing']['total_s']:.1f}")
    return writer
