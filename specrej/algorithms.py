"""Best-of-N and Speculative Rejection (Sun et al., 2024, Algorithm 1) for one prompt."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from .budget import PeakMemory, default_memory_budget, format_size, token_capacity
from .decoding import Rollout, RowOutput, decode_n_tokens
from .engine import Engine
from .errors import SpecrejError
from .rewards import Response, Reward, finite_scores
from .sampling import SamplingParams
from .selection import DEFAULT_MAX_INIT_BATCH, AlphaCut, Cut


@dataclass
class Candidate:
    id: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    finished: bool = False  # ended with a stop token (EOS)
    complete: bool = False  # finished or reached max_new_tokens: nothing more will be generated
    halted_round: int | None = None  # the round that halted it while live (a complete response never is)
    round_scores: list[float] = field(default_factory=list)  # its score at each round it took part in
    final_score: float | None = None  # reward of the complete response

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Round:
    decision_token: int  # tokens generated per live row when the round was decided
    batch_before: int  # live (generating) rows before the cut
    batch_after: int  # live rows that go on
    ranked: int  # the batch of eq. 3: live rows and the responses completed since the last round (0: no reward used)
    # the cutoff's rank: the rows the rule keeps before ties at the cutoff. A rank rule sets it (eq. 4:
    # ceil((1 - alpha) * ranked)); a rule that cuts at a score (the adaptive cut) has none, so it is
    # the rows at or above that score, = accepted
    kept: int
    accepted: int  # scores >= cutoff (eq. 5): kept plus the ties at the cutoff
    cutoff: float | None  # r_cut (eq. 4), or the adaptive rule's cutoff; None for a reward-free decision
    memory_guard_halted: int  # accepted live rows halted anyway because they did not fit the budget
    rule: dict = field(default_factory=dict)  # the cut's record: which rule, and why this cutoff


@dataclass
class Result:
    prompt: str
    method: str
    params: dict
    candidates: list[Candidate]
    rounds: list[Round]
    timing: dict  # total_s, generate_s (prefill + decode), score_s
    tokens: dict  # generated (sampled tokens, all rows), scored (response tokens given to the reward)
    peak_kv_bytes: int  # computed: the peak of the allocated KV cache (its storages), transients included
    memory_margin_bytes: int = 0  # Engine.memory_margin: what the run may allocate beside the KV budget
    measured_peak_bytes: int | None = None  # measured: budget.PeakMemory around the prompt's run (None: not measured)
    retries: int = 0  # out-of-memory retries with a halved batch (api.run_one); the final batch is in params

    @property
    def finalists(self) -> list[Candidate]:
        """The final set I of Algorithm 1: every completed response (a halted row never completes)."""
        return [c for c in self.candidates if c.complete]

    @property
    def best(self) -> Candidate | None:
        """Eq. 6: the finalist with the highest final score (ties: lowest id)."""
        return max(self.finalists, key=lambda c: (c.final_score, -c.id), default=None)

    @property
    def worst(self) -> Candidate | None:
        """The finalist with the lowest final score: with `best`, the reward range eq. 8 divides by."""
        return min(self.finalists, key=lambda c: (c.final_score, c.id), default=None)

    def to_record(self, prompt_id) -> dict:
        best, worst = self.best, self.worst
        candidates = []
        for c in self.candidates:
            record = asdict(c)
            record["token_logprobs"] = [round(x, 5) for x in c.token_logprobs]
            record["num_tokens"] = c.num_tokens
            candidates.append(record)
        return {
            "prompt_id": prompt_id,
            "prompt": self.prompt,
            "method": self.method,
            "params": self.params,
            "best": None if best is None else
            {"candidate_id": best.id, "text": best.text, "score": best.final_score, "num_tokens": best.num_tokens},
            "worst": None if worst is None else {"candidate_id": worst.id, "score": worst.final_score},
            "candidates": candidates,
            "rounds": [asdict(r) for r in self.rounds],
            "timing": self.timing,
            "tokens": self.tokens,
            "peak_kv_bytes": self.peak_kv_bytes,
            "measured_peak_bytes": self.measured_peak_bytes,
            "memory_margin_bytes": self.memory_margin_bytes,
            "retries": self.retries,
        }


class BatchOutOfMemory(Exception):
    """Out of memory (CUDA, or the host) during a prompt's run: `rows` is the first batch the run
    started (None: it failed before any, e.g. in the prefill), `detail` the error in one line.
    `api.run_loaded` retries the prompt with half that batch."""

    def __init__(self, rows: int | None, detail: str):
        super().__init__(f"out of memory with a batch of {rows}: {detail}")
        self.rows, self.detail = rows, detail


def _typed_out_of_memory(step):
    """A `PromptRun` step whose out-of-memory error becomes `BatchOutOfMemory` with the run's first
    batch; raised after the except block, so the failed step's frames (its tensors) are gone."""

    @functools.wraps(step)
    def run_step(self, *args, **kwargs):
        try:
            return step(self, *args, **kwargs)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            failure = BatchOutOfMemory(self.first_batch, f"{type(error).__name__}: "
                                                         f"{str(error).splitlines()[0] if str(error) else ''}")
        raise failure

    return run_step


def measured_memory(algorithm):
    """Run `algorithm` inside `PeakMemory` and record the measured peak in its Result.

    measure_memory: True, False, or None (the default): the environment variable
    SPECREJ_MEASURE_MEMORY (1 / 0) if set, else on for CUDA (the allocator's statistics cost
    nothing) and off on CPU (budget.StorageTracker intercepts every op: about 10-20 % more time
    for batches of 16-64 rows of SmolLM2, which would bias timings)."""

    @functools.wraps(algorithm)
    def run(engine: Engine, *args, measure_memory: bool | None = None, **kwargs) -> Result:
        if measure_memory is None:
            setting = os.environ.get("SPECREJ_MEASURE_MEMORY", "").strip()
            measure_memory = setting not in ("0", "false") if setting else engine.device.type == "cuda"
        meter = PeakMemory(engine.device) if measure_memory else None
        with meter or contextlib.nullcontext():
            result = algorithm(engine, *args, **kwargs)
        result.measured_peak_bytes = meter.peak_bytes if meter else None
        return result

    return run


def memory_guard(going_on: Sequence[Candidate], priority: dict[int, float], room: int | None
                 ) -> tuple[list[Candidate], list[Candidate]]:
    """The rows a cut let go on, split into those that fit `room` more rows (None: all) and those
    halted because they do not: the lowest `priority` are halted first (ties: the highest id)."""
    order = sorted(going_on, key=lambda c: (-priority[c.id], c.id))
    return (order, []) if room is None else (order[:room], order[room:])


def is_out_of_memory(error: BaseException) -> bool:
    """torch's OutOfMemoryError (CUDA), the host allocator's failure (a RuntimeError from
    DefaultCPUAllocator) or Python's MemoryError."""
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error))


@measured_memory
def best_of_n(engine: Engine, reward: Reward, prompt: str, *, n: int, batch_size: int | None = None,
              memory_budget: int | None = None, sampling: SamplingParams = SamplingParams(), seed: int = 0) -> Result:
    """Sample n responses in batches (the largest that fits the memory budget unless given)
    and return them all, scored; `Result.best` is the Best-of-N choice. A batch's cache is freed
    before the next batch is allocated. `measure_memory`: see `measured_memory`."""
    if n < 1:
        raise SpecrejError(f"n must be >= 1, got {n}")
    run = PromptRun(engine, reward, prompt, sampling, seed)
    capacity = run.capacity(memory_budget)
    fits = capacity // sampling.max_new_tokens
    batch_size = batch_size or min(n, fits)
    if batch_size > fits:
        raise SpecrejError(f"a batch of {batch_size} x {sampling.max_new_tokens} tokens does not fit the memory "
                           f"budget ({fits} rows fit); lower the batch size or raise the budget")
    for start in range(0, n, batch_size):
        rollout = run.start(min(batch_size, n - start), sampling.max_new_tokens)
        run.generate(rollout, capacity)
    return run.finish("bon", {"n": n, "batch_size": batch_size})


@measured_memory
def speculative_rejection(engine: Engine, reward: Reward, prompt: str, *, alpha: float,
                          memory_budget: int | None = None, init_batch_size: int | None = None,
                          max_init_batch: int = DEFAULT_MAX_INIT_BATCH, sampling: SamplingParams = SamplingParams(),
                          seed: int = 0, min_tokens: int = 8, decision_tokens: Iterable[int] = (),
                          cut: Cut | None = None) -> Result:
    """Speculative Rejection, Algorithm 1 with eq. 3-6.

    b_init (unless given) is ``default_init_batch``: as many rows as the budget holds for
    `min_tokens` tokens each, at most `max_init_batch`. Generate until the KV cache would
    overflow the budget: that step is the decision token. Score the batch (live rows and the
    responses completed since the last decision), cut at r_cut and keep every response scoring
    >= r_cut (ties included); completed responses join the final set I for good. Repeat until no
    row is live; the answer is the best of I (`Result.best`). `decision_tokens` adds decisions at
    fixed lengths (for studies). With alpha = 0 and b_init = N this is exactly Best-of-N. `cut`
    replaces the alpha cut of eq. 4-5 (`selection.AlphaCut`), e.g. by `adaptive.AdaptiveCut`.
    `measure_memory`: see `measured_memory`.
    """
    check_alpha(alpha)
    decision_tokens = set(decision_tokens)
    run = PromptRun(engine, reward, prompt, sampling, seed)
    capacity = run.capacity(memory_budget)
    b_init = init_batch_size or default_init_batch(capacity, min_tokens, max_init_batch)
    if b_init < 1 or b_init * min_tokens > capacity:
        raise SpecrejError(f"an initial batch of {b_init} does not fit {min_tokens} tokens each in the memory "
                           f"budget ({capacity} tokens of KV); lower the batch size or raise the budget")
    cut = cut or AlphaCut(alpha)
    rollout = run.start(b_init, min(sampling.max_new_tokens, capacity // b_init))  # lines 2-3
    rounds: list[Round] = []
    while rollout.num_rows:  # line 4: b > 0
        run.generate(rollout, capacity, decision_tokens)  # line 5: until memory runs short
        if not rollout.num_rows:
            break
        batch = run.score_batch(rollout)  # line 6, eq. 3: live rows and newly completed responses
        scores = [c.round_scores[-1] for c in batch]
        keep, why = cut([c.id for c in batch], scores, rollout.length)  # eq. 4-5: every score >= r_cut
        # line 7: completed responses are already in I. Memory guard: if the cut freed too little,
        # the survivors the cut ranks lowest that cannot take one more token are halted too.
        priority = dict(zip((c.id for c in batch), cut.priority([c.id for c in batch], scores)))
        going_on, guard = memory_guard([c for c, ok in zip(batch, keep) if ok and not c.complete], priority,
                                       capacity // (rollout.length + 1) if rollout.needs_room else None)
        rounds.append(Round(decision_token=rollout.length, batch_before=rollout.num_rows, batch_after=len(going_on),
                            ranked=len(batch), kept=why.get("kept", sum(keep)), accepted=sum(keep),
                            cutoff=why["cutoff"], memory_guard_halted=len(guard), rule=why))
        going_on_ids = {c.id for c in going_on}
        run.halt(rollout, [c for c in batch if not c.complete and c.id not in going_on_ids], len(rounds) - 1)
    return run.finish("sr", {"alpha": alpha, "init_batch_size": b_init, "max_init_batch": max_init_batch,
                             "min_tokens": min_tokens, "decision_tokens": sorted(decision_tokens),
                             "rejection": cut.describe()}, rounds)


class _StopAt:
    """`decode_n_tokens`'s stop_at: the scheduled lengths, or any length once `now` is set."""

    def __init__(self, lengths: set[int]):
        self.lengths, self.now = lengths, False

    def __contains__(self, length: int) -> bool:
        return self.now or length in self.lengths


def default_init_batch(capacity: int, min_tokens: int, max_init_batch: int = DEFAULT_MAX_INIT_BATCH) -> int:
    """b_init of Algorithm 1, line 2: the rows whose first `min_tokens` tokens fit the budget,
    capped at `max_init_batch`. The official code starts from at most 1000 rows with at least 8
    tokens before the first cut; without the cap an 80 GB GPU would start tens of thousands of
    rows and cut them at token 8, where partial rewards predict least."""
    return min(max_init_batch, capacity // min_tokens)


def check_alpha(alpha: float | None, name: str = "alpha", what: str = "") -> None:
    """SR's rejection rate must be in [0, 1): the one check, for the API and the CLI too (their
    messages name the option, `name`, and say `what` it is for)."""
    if alpha is None or not 0 <= alpha < 1:
        raise SpecrejError(f"{name} must be in [0, 1){what}, got {alpha}")


class PromptRun:
    """Book-keeping shared by every method for one prompt: candidates, timers, counters.
    `layer_states`: the prefill keeps the prompt's every-layer states (`PrefilledPrompt.layer_states`)."""

    @_typed_out_of_memory
    def __init__(self, engine: Engine, reward: Reward, prompt: str, sampling: SamplingParams, seed: int,
                 layer_states: bool = False):
        self.first_batch: int | None = None  # rows of the first batch started (BatchOutOfMemory.rows)
        if not prompt.strip():
            raise SpecrejError("empty prompt")
        self.started = time.perf_counter()
        self.engine, self.reward, self.prompt, self.sampling, self.seed = engine, reward, prompt, sampling, seed
        self.prompt_ids = engine.encode_prompt(prompt)
        engine.check_fits(len(self.prompt_ids), sampling.max_new_tokens)
        self.generator = torch.Generator(device=engine.device).manual_seed(seed)
        self.candidates: list[Candidate] = []
        self.rollouts: list[Rollout] = []  # every batch's, for its counters; a finished one is released
        self.max_rows = 0
        self.decided_at: set[int] = set()
        self.generate_s = self.score_s = 0.0
        self.tokens_scored = 0
        self.budget = 0
        self.warned_nonfinite = False
        tic = time.perf_counter()
        self.prefilled = engine.prefill(self.prompt_ids, layer_states)
        self.generate_s += time.perf_counter() - tic

    def capacity(self, memory_budget: int | None) -> int:
        """Generated-token slots of KV (rows x tokens) the budget holds beside the prompt."""
        self.budget = memory_budget if memory_budget is not None else default_memory_budget(self.engine.device)
        capacity = token_capacity(self.budget, self.engine.kv_bytes_per_token, len(self.prompt_ids),
                                  len(self.engine.layers))
        if capacity < self.sampling.max_new_tokens:
            raise SpecrejError(f"the memory budget of {format_size(self.budget)} holds {capacity} tokens of KV beside "
                               f"the prompt; one response of max_new_tokens={self.sampling.max_new_tokens} needs more")
        return capacity

    @_typed_out_of_memory
    def start(self, rows: int, max_len: int) -> Rollout:
        self._release()  # a finished batch's cache is freed before the next one is allocated
        if self.first_batch is None:
            self.first_batch = rows
        self.max_rows = max(self.max_rows, rows)
        first = len(self.candidates)
        self.candidates += [Candidate(first + i) for i in range(rows)]
        rollout = self.engine.rollout(self.prefilled, rows, max_len, self.sampling, self.generator, first)
        self.rollouts.append(rollout)
        return rollout

    @_typed_out_of_memory
    def generate(self, rollout: Rollout, capacity: int, decision_tokens: set[int] = frozenset(),
                 observe: Callable[[list[RowOutput]], bool] | None = None) -> None:
        """Decode until every row is complete, memory runs short, a scheduled decision token, or
        `observe`, called after each step with the rows it finished, returns True."""
        tic = time.perf_counter()
        stop = _StopAt(decision_tokens - self.decided_at)

        def on_finished(finished: list[RowOutput]) -> None:
            self.update(finished, complete=True)
            stop.now = observe is not None and observe(finished)

        decode_n_tokens(rollout, capacity, stop, on_finished)
        self.decided_at.add(rollout.length)
        self.generate_s += time.perf_counter() - tic

    @_typed_out_of_memory
    def score_batch(self, rollout: Rollout) -> list[Candidate]:
        """Score the round's batch, best first: the live rows' partial responses and the responses
        completed since the last round (their partial score is their final score, eq. 3)."""
        self.update(rollout.partial_outputs(), complete=False)
        completed = [c for c in self.candidates if c.complete and c.final_score is None]
        self._score_final(completed)
        live = [self.candidates[i] for i in rollout.candidate_ids.tolist()]
        for c, s in zip(live, self._score(live)):
            c.round_scores.append(s)
        for c in completed:
            c.round_scores.append(c.final_score)
        return sorted(live + completed, key=lambda c: (-c.round_scores[-1], c.id))

    def halt(self, rollout: Rollout, candidates: Sequence[Candidate], round_index: int) -> None:
        for c in candidates:
            c.halted_round = round_index
        rollout.halt(c.id for c in candidates)

    def _release(self) -> None:
        for rollout in self.rollouts:
            if not rollout.released:
                rollout.release()

    @_typed_out_of_memory
    def finish(self, method: str, params: dict, rounds: Sequence[Round] = ()) -> Result:
        self._release()
        self._score_final([c for c in self.candidates if c.complete and c.final_score is None])
        params = {**params, "memory_budget": self.budget, "seed": self.seed, **asdict(self.sampling),
                  "forward": self.engine.forward_kind}  # which forward pass ran: llama | hf
        return Result(
            prompt=self.prompt, method=method, params=params, candidates=self.candidates, rounds=list(rounds),
            timing={"total_s": time.perf_counter() - self.started, "generate_s": self.generate_s, "score_s": self.score_s},
            tokens={"generated": sum(r.tokens_generated for r in self.rollouts), "scored": self.tokens_scored},
            peak_kv_bytes=max(r.cache.peak_bytes for r in self.rollouts),
            memory_margin_bytes=self.engine.memory_margin(len(self.prompt_ids), self.max_rows, self.sampling),
        )

    def update(self, outputs: list[RowOutput], complete: bool) -> None:
        """The candidates of `outputs` take their tokens, log-probs and text (and `complete`)."""
        texts = self.engine.detokenize([o.token_ids for o in outputs])
        for out, text in zip(outputs, texts):
            c = self.candidates[out.candidate_id]
            c.text, c.token_ids, c.token_logprobs = text, out.token_ids, out.token_logprobs
            c.finished, c.complete = out.stopped, complete

    def _score_final(self, candidates: list[Candidate]) -> None:
        for c, s in zip(candidates, self._score(candidates)):
            c.final_score = s

    def _score(self, candidates: list[Candidate]) -> list[float]:
        if not candidates:
            return []
        tic = time.perf_counter()
        scores = self.reward.score(self.prompt, [Response(c.text, c.token_ids, c.token_logprobs) for c in candidates])
        self.score_s += time.perf_counter() - tic
        self.tokens_scored += sum(c.num_tokens for c in candidates)
        # one warning per prompt: a broken reward would flood the log
        scores, nonfinite = finite_scores(scores, self.reward, repr(self.prompt[:60]), warn=not self.warned_nonfinite,
                                          stacklevel=2)
        self.warned_nonfinite |= nonfinite
        return scores
