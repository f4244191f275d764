"""The Python API behind `specrej generate`: load once, run a prompt file, append records."""

from __future__ import annotations

import gc
import hashlib
import numbers
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence

import torch
from tqdm.auto import tqdm

from .algorithms import Result, best_of_n, check_alpha, is_out_of_memory, speculative_rejection
from .engine import Engine
from .adaptive import AdaptiveCut
from .selection import DEFAULT_MAX_INIT_BATCH
from .errors import SpecrejError
from .io import PromptItem, RecordWriter, read_prompts
from .models import load_generator
from .rewards import Response, Reward
from .sampling import SamplingParams, check_int, is_real, shown


def load_engine(model: str = "default", *, dtype: str = "auto", device: str = "auto",
                trust_remote_code: bool = False) -> Engine:
    return Engine(*load_generator(model, dtype, device, trust_remote_code))


def prompt_seed(seed: int, prompt_id) -> int:
    """A seed per prompt, stable under resume and reordering, and distinct across prompts."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()[:8], "little") >> 1


def run_one(engine: Engine, reward: Reward, prompt: str, *, method: str, seed: int = 0,
            sampling: SamplingParams = SamplingParams(), n: int | None = None, alpha: float | None = None,
            batch_size: int | None = None, memory_budget: int | None = None, min_tokens: int = 8,
            max_init_batch: int = DEFAULT_MAX_INIT_BATCH, decision_tokens: Iterable[int] = (),
            measure_memory: bool | None = None, rejection: str = "alpha", delta: float = 0.05,
            fits: dict | None = None) -> Result:
    """One prompt with Best-of-N or SR. Out of memory (CUDA, or the host) during the prompt, it
    is run again from the start with half the batch (BoN: the same n in more batches; SR: half
    the initial batch), until a batch of one fails too; `Result.retries` counts the retries and
    the batch that succeeded is in its params (batch_size / init_batch_size). Responses are
    never cut short to make room. `measure_memory`: see `algorithms._measured` (None: on for
    CUDA, off on CPU unless SPECREJ_MEASURE_MEMORY=1). SR's `rejection`: "alpha" (eq. 4-5) or
    "adaptive" (`adaptive.AdaptiveCut` with `delta` and the pair's `fits`, or an online estimate
    without; alpha is then its fallback), a fresh rule per attempt: its state is per prompt."""
    if method not in ("bon", "sr"):
        raise SpecrejError(f"unknown method {method!r}; choose bon or sr")
    retries = 0
    while True:
        try:
            if method == "bon":
                result = best_of_n(engine, reward, prompt, n=n, batch_size=batch_size, memory_budget=memory_budget,
                                   sampling=sampling, seed=seed, measure_memory=measure_memory)
            else:
                result = speculative_rejection(engine, reward, prompt, alpha=alpha, init_batch_size=batch_size,
                                               memory_budget=memory_budget, sampling=sampling, seed=seed,
                                               min_tokens=min_tokens, max_init_batch=max_init_batch,
                                               decision_tokens=decision_tokens, measure_memory=measure_memory,
                                               cut=AdaptiveCut(delta, fits, fallback_alpha=alpha)
                                               if rejection == "adaptive" else None)
            result.retries = retries
            return result
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            failed_rows = getattr(error, "rows", None)
            detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        # outside the except block: the traceback (and the failed attempt's tensors) is gone
        _free_memory(engine.device)
        if not failed_rows or failed_rows <= 1:
            where = "before any row was sampled" if not failed_rows else "with a batch of 1"
            raise SpecrejError(f"out of memory {where} ({detail})")
        batch_size = failed_rows // 2
        retries += 1
        warnings.warn(f"out of memory with a batch of {failed_rows} ({detail}); retrying the prompt with "
                      f"{batch_size}", stacklevel=2)


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


def validate(method: str, n: int | None = None, alpha: float | None = None, *,
             sampling: SamplingParams | None = None, seed: int = 0, batch_size: int | None = None,
             memory_budget: int | None = None, min_tokens: int = 8, max_init_batch: int = DEFAULT_MAX_INIT_BATCH,
             decision_tokens: Iterable[int] = (), rejection: str = "alpha", delta: float = 0.05,
             fits: object = None, measure_memory: bool | None = None,
             reward_batch_size: int | None = None) -> None:
    """Reject bad settings before any model is loaded: the one check of `specrej generate`'s
    options (the CLI runs it first) and of `run_prompts`' (the same arguments; `reward_batch_size`
    is the CLI's --reward-batch-size, None: not checked). Each message names the CLI option.

    Every number is range-checked (NaN and +-inf are refused wherever a float is taken); an
    option the chosen method or rule would silently ignore is refused too: --alpha, or
    --decision-tokens / --rejection adaptive, with bon; --n with sr (its responses are
    --batch-size, or the budget's); --fit (`fits`, for the CLI the path) without --rejection
    adaptive. Taken as they are: a --batch-size above --max-init-batch (that cap bounds only the
    default b_init), decision tokens beyond --max-new-tokens (never reached) and repeated ones
    (a set), and any integer --seed (hashed per prompt, `prompt_seed`).
    """
    if method not in ("bon", "sr"):
        raise SpecrejError(f"unknown method {method!r}; choose bon or sr")
    if method == "bon":
        if n is None:
            raise SpecrejError("--n is required with --method bon (the number of responses, >= 1)")
        check_int(n, "--n", 1)
        if alpha is not None:
            raise SpecrejError(f"--alpha is for --method sr, got --alpha {shown(alpha)} with --method bon (Best-of-N takes "
                               "only --n)")
    else:
        if n is not None:
            raise SpecrejError(f"--n is for --method bon, got --n {shown(n)} with --method sr (its initial batch is "
                               "--batch-size, or the memory budget's)")
        if not is_real(alpha):
            raise SpecrejError(f"--alpha must be in [0, 1) for speculative rejection, got {shown(alpha)}")
        check_alpha(alpha, "--alpha", " for speculative rejection")
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise SpecrejError(f"sampling must be a SamplingParams, got {shown(sampling)}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise SpecrejError(f"--seed must be an integer, got {shown(seed)}")
    if batch_size is not None:
        check_int(batch_size, "--batch-size", 1)
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
    check_int(min_tokens, "--min-tokens", 1)
    check_int(max_init_batch, "--max-init-batch", 1)
    if isinstance(decision_tokens, (str, bytes)) or not isinstance(decision_tokens, Iterable):
        raise SpecrejError(f"--decision-tokens must be a list of integers >= 1, got {shown(decision_tokens)}")
    taus = list(decision_tokens)
    for tau in taus:
        check_int(tau, "--decision-tokens", 1)
    if rejection not in ("alpha", "adaptive"):
        raise SpecrejError(f"--rejection must be alpha or adaptive, got {shown(rejection)}")
    if not is_real(delta) or not 0 <= delta <= 0.5:
        raise SpecrejError(f"--delta must be in [0, 0.5] (0: keep every row, as Best-of-N), got {shown(delta)}")
    if method == "bon" and taus:
        raise SpecrejError("--decision-tokens is for --method sr (Best-of-N has no rejection rounds)")
    if method == "bon" and rejection == "adaptive":
        raise SpecrejError("--rejection adaptive is for --method sr (Best-of-N rejects nothing)")
    if fits is not None and rejection != "adaptive":
        raise SpecrejError("--fit is for --rejection adaptive (the alpha rule fits nothing)")
    if reward_batch_size is not None:
        check_int(reward_batch_size, "--reward-batch-size", 1)


def run_prompts(prompts: str | os.PathLike | list[PromptItem], out: str | os.PathLike, *, engine: Engine,
                reward: Reward, method: str, model_name: str, reward_name: str, seed: int = 0,
                sampling: SamplingParams = SamplingParams(), n: int | None = None, alpha: float | None = None,
                progress: bool = True, **options) -> RecordWriter:
    """Run every prompt not yet in `out`, appending one record per prompt as it finishes.

    A prompt that fails (empty, too long for the model, its reward raised, ...) gets an error
    record and the others go on; the returned (closed) writer's `errors` maps the prompt ids
    that failed, in this run or an earlier one, to their errors. `out` is locked while the run
    writes it (`io.output_lock`). `options` go to `run_one` (batch_size, memory_budget,
    min_tokens, decision_tokens, measure_memory); a prompt that runs out of memory is retried
    with a smaller batch there. Bad settings raise SpecrejError (`validate`) before `out` is
    opened or a prompt read.
    """
    if isinstance(options.get("decision_tokens"), Iterator):  # read once here, used for every prompt
        options["decision_tokens"] = list(options["decision_tokens"])
    validate(method, n, alpha, sampling=sampling, seed=seed, **options)  # before anything is read or written
    items = read_prompts(prompts) if not isinstance(prompts, list) else prompts
    settings = {"method": method, "model": model_name, "reward": reward_name, "seed": seed,
                **({"n": n} if method == "bon" else {"alpha": alpha}), **vars(sampling)}
    reward = _ReportedReward(reward)
    with RecordWriter(out, settings) as writer:
        todo = [item for item in items if item.prompt_id not in writer.done]
        bar = tqdm(todo, desc=f"{method} {os.path.basename(os.fspath(out))}", unit="prompt", disable=not progress,
                   initial=len(items) - len(todo), total=len(items))
        for item in bar:
            params = {k: v for k, v in settings.items() if k != "method"}
            params["prompt_seed"] = prompt_seed(seed, item.prompt_id)
            try:
                result = run_one(engine, reward, item.prompt, method=method, seed=params["prompt_seed"],
                                 sampling=sampling, n=n, alpha=alpha, **options)
            except SpecrejError as error:
                warnings.warn(f"prompt {item.prompt_id}: {error}", stacklevel=2)
                writer.write({"prompt_id": item.prompt_id, "prompt": item.prompt, "method": method,
                              "params": params, "error": str(error)})
                continue
            record = result.to_record(item.prompt_id)
            record["params"] = {**record["params"], **params}
            writer.write(record)
            if record["best"]:
                bar.set_postfix(best=f"{record['best']['score']:.3g}", s=f"{record['timing']['total_s']:.1f}")
    return writer
