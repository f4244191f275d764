"""Best-of-N and Speculative Rejection (Sun et al., 2024, Algorithm 1) for one prompt."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from .budget import default_memory_budget, format_size, token_capacity
from .engine import Engine, Rollout, RowOutput, SamplingParams
from .errors import SpecrejError
from .rewards import Response, Reward
from .selection import num_kept


@dataclass
class Candidate:
    id: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    finished: bool = False  # ended with a stop token (EOS)
    complete: bool = False  # finished or reached max_new_tokens: nothing more will be generated
    halted_round: int | None = None  # the round that rejected it, if any
    round_scores: list[float] = field(default_factory=list)  # its score at each round it took part in
    final_score: float | None = None  # reward of the complete response

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Round:
    decision_token: int  # tokens generated per live row when the round was decided
    batch_before: int  # live (generating) rows before the cut
    batch_after: int
    ranked: int  # candidates ranked: live rows and complete responses still in the running
    kept: int  # ceil((1 - alpha) * ranked), before the memory guard
    cutoff: float  # lowest score kept by the alpha cut
    memory_guard_halted: int  # extra live rows halted because the survivors still did not fit


@dataclass
class Result:
    prompt: str
    method: str
    params: dict
    candidates: list[Candidate]
    rounds: list[Round]
    timing: dict  # total_s, generate_s (prefill + decode), score_s
    tokens: dict  # generated (sampled tokens, all rows), scored (response tokens given to the reward)
    peak_kv_bytes: int

    @property
    def best(self) -> Candidate | None:
        """The complete, never-halted candidate with the highest final score (ties: lowest id)."""
        finalists = [c for c in self.candidates if c.complete and c.halted_round is None]
        return max(finalists, key=lambda c: (c.final_score, -c.id), default=None)

    def to_record(self, prompt_id) -> dict:
        best = self.best
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
            "candidates": candidates,
            "rounds": [asdict(r) for r in self.rounds],
            "timing": self.timing,
            "tokens": self.tokens,
            "peak_kv_bytes": self.peak_kv_bytes,
        }


def best_of_n(engine: Engine, reward: Reward, prompt: str, *, n: int, batch_size: int | None = None,
              memory_budget: int | None = None, sampling: SamplingParams = SamplingParams(), seed: int = 0) -> Result:
    """Sample n responses in batches (the largest that fits the memory budget unless given)
    and return them all, scored; `Result.best` is the Best-of-N choice."""
    if n < 1:
        raise SpecrejError(f"n must be >= 1, got {n}")
    run = _Run(engine, reward, prompt, sampling, seed)
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


def speculative_rejection(engine: Engine, reward: Reward, prompt: str, *, alpha: float,
                          memory_budget: int | None = None, init_batch_size: int | None = None,
                          sampling: SamplingParams = SamplingParams(), seed: int = 0, min_tokens: int = 8,
                          decision_tokens: Iterable[int] = ()) -> Result:
    """Speculative Rejection, Algorithm 1.

    Start with b_init responses (as many as the budget holds for `min_tokens` tokens, unless
    given) and generate until the KV cache would overflow the budget: that step is the decision
    token. Score every response so far, complete ones included; keep the top
    ceil((1 - alpha) * n) (`selection.num_kept`) and halt the rest; repeat until every survivor
    is complete. The answer is `Result.best`. `decision_tokens` adds decisions at fixed lengths
    (for studies). With alpha = 0 and b_init = N (and room for N full responses), this is
    exactly Best-of-N.
    """
    if not 0 <= alpha < 1:
        raise SpecrejError(f"alpha must be in [0, 1), got {alpha}")
    decision_tokens = set(decision_tokens)
    run = _Run(engine, reward, prompt, sampling, seed)
    capacity = run.capacity(memory_budget)
    b_init = init_batch_size or capacity // min_tokens
    if b_init < 1 or b_init * min_tokens > capacity:
        raise SpecrejError(f"an initial batch of {b_init} does not fit {min_tokens} tokens each in the memory "
                           f"budget ({capacity} tokens of KV); lower the batch size or raise the budget")
    rollout = run.start(b_init, min(sampling.max_new_tokens, capacity // b_init))
    rounds: list[Round] = []
    while True:
        run.generate(rollout, capacity, decision_tokens)  # until memory runs short: the decision token
        if not rollout.num_rows:
            break
        ranked = run.rank(rollout)  # every response so far, complete ones included, best first
        kept = num_kept(len(ranked), alpha)  # the alpha-quantile cut
        survivors = [c for c in ranked[:kept] if not c.complete]
        # memory guard: if alpha freed too little, the lowest survivors that cannot take one more token go too
        guard = survivors[capacity // (rollout.length + 1):] if rollout.needs_room else []
        rounds.append(Round(decision_token=rollout.length, batch_before=rollout.num_rows,
                            batch_after=len(survivors) - len(guard), ranked=len(ranked), kept=kept,
                            cutoff=ranked[kept - 1].round_scores[-1], memory_guard_halted=len(guard)))
        run.halt(rollout, ranked[kept:] + guard, round_index=len(rounds) - 1)
    return run.finish("sr", {"alpha": alpha, "init_batch_size": b_init, "min_tokens": min_tokens,
                             "decision_tokens": sorted(decision_tokens)}, rounds)


class _Run:
    """Book-keeping shared by both algorithms for one prompt: candidates, timers, counters."""

    def __init__(self, engine: Engine, reward: Reward, prompt: str, sampling: SamplingParams, seed: int):
        if not prompt.strip():
            raise SpecrejError("empty prompt")
        self.started = time.perf_counter()
        self.engine, self.reward, self.prompt, self.sampling, self.seed = engine, reward, prompt, sampling, seed
        self.prompt_ids = engine.encode_prompt(prompt)
        engine.check_fits(len(self.prompt_ids), sampling.max_new_tokens)
        self.generator = torch.Generator(device=engine.device).manual_seed(seed)
        self.candidates: list[Candidate] = []
        self.rollouts: list[Rollout] = []
        self.decided_at: set[int] = set()
        self.generate_s = self.score_s = 0.0
        self.tokens_scored = 0
        self.budget = 0
        self.warned_nonfinite = False
        tic = time.perf_counter()
        self.prefilled = engine.prefill(self.prompt_ids)
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

    def start(self, rows: int, max_len: int) -> Rollout:
        first = len(self.candidates)
        self.candidates += [Candidate(first + i) for i in range(rows)]
        rollout = Rollout(self.engine, self.prefilled, rows, max_len, self.sampling, self.generator, first)
        self.rollouts.append(rollout)
        return rollout

    def generate(self, rollout: Rollout, capacity: int, decision_tokens: set[int] = frozenset()) -> None:
        """Decode until every row is complete, memory runs short, or a scheduled decision token."""
        tic = time.perf_counter()
        while rollout.num_rows:
            if rollout.length in decision_tokens and rollout.length not in self.decided_at:
                break
            if rollout.needs_room:
                if rollout.num_rows * (rollout.length + 1) > capacity:
                    break
                rollout.grow(min(self.sampling.max_new_tokens, capacity // rollout.num_rows))
            self._update(rollout.step(), complete=True)
        self.decided_at.add(rollout.length)
        self.generate_s += time.perf_counter() - tic

    def rank(self, rollout: Rollout) -> list[Candidate]:
        """Score every candidate still in the running (partial or complete), best first."""
        self._update(rollout.partial_outputs(), complete=False)
        alive = [c for c in self.candidates if c.halted_round is None]
        self._score_final([c for c in alive if c.complete and c.final_score is None])
        partial = [c for c in alive if not c.complete]
        for c, s in zip(partial, self._score(partial)):
            c.round_scores.append(s)
        for c in alive:
            if c.complete:
                c.round_scores.append(c.final_score)
        return sorted(alive, key=lambda c: (-c.round_scores[-1], c.id))

    def halt(self, rollout: Rollout, candidates: Sequence[Candidate], round_index: int) -> None:
        for c in candidates:
            c.halted_round = round_index
        rollout.halt(c.id for c in candidates if not c.complete)

    def finish(self, method: str, params: dict, rounds: Sequence[Round] = ()) -> Result:
        self._score_final([c for c in self.candidates if c.complete and c.halted_round is None and c.final_score is None])
        params = {**params, "memory_budget": self.budget, "seed": self.seed, **asdict(self.sampling)}
        return Result(
            prompt=self.prompt, method=method, params=params, candidates=self.candidates, rounds=list(rounds),
            timing={"total_s": time.perf_counter() - self.started, "generate_s": self.generate_s, "score_s": self.score_s},
            tokens={"generated": sum(r.tokens_generated for r in self.rollouts), "scored": self.tokens_scored},
            peak_kv_bytes=max(r.cache.peak_bytes for r in self.rollouts),
        )

    def _update(self, outputs: list[RowOutput], complete: bool) -> None:
        texts = self.engine.decode([o.token_ids for o in outputs])
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
        if any(math.isnan(s) or s == math.inf for s in scores) and not self.warned_nonfinite:
            self.warned_nonfinite = True  # once per prompt: a broken reward would flood the log
            warnings.warn(f"reward {getattr(self.reward, 'name', '?')} gave NaN/inf scores for prompt "
                          f"{self.prompt[:60]!r}; they count as -inf", stacklevel=2)
        return [s if math.isfinite(s) else float("-inf") for s in scores]
