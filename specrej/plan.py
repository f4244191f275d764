"""A run's plan: every setting of a run checked once, before any model loads or its output is
opened (`check_run`), and the output settings a resume is compared on (`output_settings`),
together a `RunPlan` (`plan_run`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .engine.sampling import SamplingParams, check_int
from .errors import SpecrejError, shown
from .methods import Method, Params, file_digest, get_method
from .methods.registry import method_code
from .records.answers import SELECT_RULES

if TYPE_CHECKING:
    from .engine.engine import Engine


# the largest --memory-budget taken: 1 EiB, far above any device, so a larger one is a typo
MAX_MEMORY_BUDGET = 2**60


def check_run(method: str | Method, params: Mapping = MappingProxyType({}), *, sampling: SamplingParams | None = None,
              seed: int = 0, memory_budget: int | None = None,
              reward_batch_size: int | None = None) -> tuple[Method, Params]:
    """Check every setting before any model loads and return the method with its checked
    parameters (`Method.check`, which also reads a file parameter once): the one check of
    `specrej generate`'s options and of `run_prompts`' arguments (`reward_batch_size` is the CLI's
    --reward-batch-size, None: not checked). Each message names the CLI option. A parameter the
    method does not take is refused rather than ignored; every number is range-checked (NaN and
    +-inf are refused wherever a float is taken); any integer --seed is taken (hashed per prompt).
    `params` already checked (a `Params`) are taken as they are."""
    method = method if isinstance(method, Method) else get_method(method)
    checked = method.check(params)
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise SpecrejError(f"sampling must be a SamplingParams, got {shown(sampling)}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise SpecrejError(f"--seed must be an integer, got {shown(seed)}")
    if memory_budget is not None:
        if isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Integral):
            raise SpecrejError(f"--memory-budget must be a number of bytes (an integer), got {shown(memory_budget)}"
                               + (" (specrej.engine.budget.parse_size reads sizes such as 2GiB)"
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
                    memory_budget: int | None, engine: Engine | None = None, prompt_format: str | None = None,
                    model_revision: str | None = None, reward_revision: str | None = None,
                    selection: str = "reward") -> dict:
    """Every setting that changes a run file's records: a rerun whose settings differ is refused
    (`io.RecordWriter`). A file parameter counts by its content; the engine's dtype and device
    as loaded (`engine_settings`; None: not known yet, e.g. before loading); the prompt format as
    asked for (`prompt_format`, else the engine's), named only when it is not "auto"; the hub
    revisions the generator and the reward model were loaded at, named only when given; the
    `selection` rule that picks each prompt's answer (`records.answers.select`), named only when it
    is not eq. 6's "reward"; the method's
    code as `method_code` (`registry.method_code`: specrej's version for a built-in method, a
    digest of its module's source for one from outside), so a rerun after the code changed is
    refused too."""
    file_params = {p.name for p in method.params if p.type == "path"}
    prompt_format = prompt_format if prompt_format is not None else getattr(engine, "prompt_format", "auto")
    return {"method": method.name, "method_code": method_code(method),
            **{f"param.{k}": (file_digest(v) if k in file_params and v else v) for k, v in params.items()},
            "model": model, **({"model_revision": model_revision} if model_revision is not None else {}),
            "reward": reward, **({"reward_revision": reward_revision} if reward_revision is not None else {}),
            "seed": seed, **vars(sampling), "memory_budget": memory_budget,
            **({"prompt_format": prompt_format} if prompt_format != "auto" else {}),
            **({"selection": selection} if selection != "reward" else {}),
            **engine_settings(engine)}


# the output settings known once the generator is loaded (`engine_settings`): a run's output is
# opened before, with these unknown, and `RecordWriter.settle` compares them after
ENGINE_SETTINGS = ("dtype", "device", "compiled")


def engine_settings(engine: Engine | None) -> dict:
    """The loaded generator's output settings: its dtype and device type (None: not loaded yet),
    and `compiled: True` when its decode step is compiled (whose bf16 rounding, and so tokens,
    differ from the eager step's); an eager engine names no `compiled`, as records before it did not."""
    if engine is None:
        return {"dtype": None, "device": None}
    return {"dtype": str(engine.dtype).removeprefix("torch."), "device": engine.device.type,
            **({"compiled": True} if engine.compiled else {})}


@dataclass(frozen=True)
class RunPlan:
    """A run's every setting, checked once by `plan_run` before a model loads or the output is
    opened: the method with its checked parameters, the sampling settings, seed and memory budget,
    the generator's and the reward's names as records hold them, and `settings`, the output
    settings a resume is checked against (`output_settings`; the dtype and device None until
    the engine is loaded: `ENGINE_SETTINGS`), and the `selection` rule of each prompt's answer."""

    method: Method
    params: Params
    sampling: SamplingParams
    seed: int
    memory_budget: int | None
    model_name: str
    reward_name: str
    settings: dict
    selection: str = "reward"

    @property
    def unknown_settings(self) -> tuple[str, ...]:
        """The output settings known only once the generator is loaded (`ENGINE_SETTINGS`): the
        output is opened with these unknown and `RecordWriter.settle` compares them after."""
        return ENGINE_SETTINGS


def plan_run(method: str | Method, params: Mapping = MappingProxyType({}), *, model_name: str, reward_name: str,
             seed: int = 0, sampling: SamplingParams = SamplingParams(), memory_budget: int | None = None,
             prompt_format: str = "auto", reward_batch_size: int | None = None, model_revision: str | None = None,
             reward_revision: str | None = None, selection: str | None = None) -> RunPlan:
    """The run's settings checked (`check_run`, once: `reward_batch_size` is only checked) and
    its output settings computed (`output_settings`, once; `prompt_format` as asked for; the hub
    revisions the models are loaded at, checked by the loaders against the models they load; the
    `selection` rule, one of `records.answers.SELECT_RULES`; None: the method's own, `Method.selection`)."""
    method, checked = check_run(method, params, sampling=sampling, seed=seed, memory_budget=memory_budget,
                                reward_batch_size=reward_batch_size)
    selection = method.selection if selection is None else selection
    if selection not in SELECT_RULES:
        raise SpecrejError(f"--selection must be one of {', '.join(SELECT_RULES)}, got {shown(selection)}")
    settings = output_settings(method, dict(checked), model=model_name, reward=reward_name, seed=seed,
                               sampling=sampling, memory_budget=memory_budget, prompt_format=prompt_format,
                               model_revision=model_revision, reward_revision=reward_revision, selection=selection)
    return RunPlan(method, checked, sampling, seed, memory_budget, model_name, reward_name, settings, selection)
