"""One prompt's run, as every method sees it: the `Session` does the book-keeping (candidates,
the KV budget, batches, scoring, halting, decisions, timers, FLOPs, out-of-memory typing) as
the work happens, and a method only decides (`Method.run(session, params)`). `prompt_run.run_method` runs a
method on one prompt: memory measurement around it, and out-of-memory retries with half the
batch. The `Result` it returns becomes the trajectory record (`Result.to_record`,
specrej/records/result.py), whose params `record_params` builds, here alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType

import torch

from ..engine.budget import TokenBudget, default_memory_budget, format_size, token_capacity
from ..engine.decoding import Rollout, RowOutput, decode_rollout, make_room, prefill
from ..engine.sampling import SamplingParams
from ..engine.work_clock import CPU_CLOCK, WorkClock
from ..errors import SpecrejError
from ..records import flops
from ..records.step_profile import profile
from ..records.answers import extract_answer
from ..records.result import Candidate, Result, Round
from ..rewards.reward import Response, Reward, finite_scores, reads_certainty
from .out_of_memory import typed_out_of_memory
from .surface import refused, refuses


@dataclass(frozen=True)
class FlopShapes:
    """The shapes the FLOP count needs: the generator's, and the reward model's (None: the reward
    runs no model, e.g. the log-prob reward)."""

    generator: flops.ModelShape
    reward: flops.ModelShape | None


class RolloutBatch:
    """A batch as a method sees it (`surface.Batch`): read-only views of the engine's `Rollout`,
    which the session alone drives."""

    __slots__ = ("rollout",)

    def __init__(self, rollout: Rollout):
        self.rollout = rollout

    collect_layer_states = refused("rollout.collect_layer_states = False")  # the Rollout a method held in 0.1.0

    @property
    def length(self) -> int:
        return self.rollout.length

    @property
    def num_rows(self) -> int:
        return self.rollout.num_rows

    @property
    def needs_room(self) -> bool:
        return self.rollout.needs_room

    @property
    def candidate_ids(self) -> torch.Tensor:
        return self.rollout.candidate_ids

    @property
    def tokens(self) -> torch.Tensor:
        return self.rollout.tokens[:, :self.rollout.length]

    @property
    def logprobs(self) -> torch.Tensor:
        return self.rollout.logprobs[:, :self.rollout.length]

    @property
    def sampled_ids(self) -> torch.Tensor | None:
        return self.rollout.sampled_ids

    @property
    def top_logprobs(self) -> torch.Tensor | None:
        return self.rollout.top_logprobs

    @property
    def layer_states(self) -> torch.Tensor | None:
        return self.rollout.layer_states


class Session:
    """One prompt's run: the implementation of `surface.MethodSession`, the whole of what a method
    uses (docs/methods.md lists each). A method starts batches (`start`), decodes (`decode`,
    `step`), scores (`score_partial`, `score_final`), halts candidates (`halt`) and records its
    decisions (`record_round`); the session keeps the candidates, the budget, the timers and the
    counts. Every complete candidate left without a final score is scored when the run finishes.
    Its other members (`engine`, `reward`, `budget`, `finish`, `rollouts`, the counters) are the
    session's own book-keeping."""

    @typed_out_of_memory
    def __init__(self, engine, reward: Reward, prompt: str, sampling: SamplingParams, seed: int,
                 memory_budget: int | None = None, shapes: FlopShapes | None = None,
                 prompt_id: int | str | None = None, answer_extract: str = "first-number"):
        self.first_batch: int | None = None  # rows of the first batch started (BatchOutOfMemory.rows)
        if not prompt.strip():
            raise SpecrejError("empty prompt")
        self.started = time.perf_counter()
        self.clock = WorkClock(engine.device)  # wall seconds of the generate and score parts; the run's compute
        self.graphs_before = engine.graph_seconds()  # graphs loaded or compiled during the run: not its compute
        self.engine, self.reward, self.prompt, self.sampling, self.seed = engine, reward, prompt, sampling, seed
        self.prompt_id = prompt_id
        self.answer_extract = answer_extract  # how `answer` finds a response's answer (`records.answers`)
        self.shapes = shapes
        self.prompt_ids = engine.encode_prompt(prompt)
        engine.check_fits(len(self.prompt_ids), sampling.max_new_tokens)
        self.memory_budget = memory_budget if memory_budget is not None else default_memory_budget(engine.device)
        self.budget = TokenBudget(token_capacity(self.memory_budget, engine.kv_bytes_per_token, len(self.prompt_ids),
                                                 len(engine.layers)))
        if self.budget.capacity < sampling.max_new_tokens:
            raise SpecrejError(f"the memory budget of {format_size(self.memory_budget)} holds {self.budget.capacity} "
                               f"tokens of KV beside the prompt; one response of max_new_tokens="
                               f"{sampling.max_new_tokens} needs more")
        self.generator = torch.Generator(device=engine.device).manual_seed(seed)
        self.candidates: list[Candidate] = []
        self.rounds: list[Round] = []
        self.rollouts: list[Rollout] = []  # every batch's, for its counters; a finished one is released
        self.prefilled = None
        self.max_rows = 0
        self.extra_bytes = 0  # memory a method holds beside the KV budget (`reserve`)
        self.certainty_bytes = 0  # the self-certainty buffers' most, for a reward that reads them
        self.scored_lengths: list[int] = []  # response tokens of every response given to the reward
        self.warned_nonfinite = False

    has_room = refused("session.has_room(rollout)")  # removed in 0.2.0: one line naming its replacement

    @property
    def capacity(self) -> int:
        """Generated-token slots of KV (rows x tokens) the budget holds beside the prompt."""
        return self.budget.capacity

    def rows_that_fit(self, length: int) -> int:
        """The most rows of `length` generated tokens each that the KV budget holds (`capacity //
        length`): e.g. how many live rows may go on to token `length` in one batch."""
        return self.budget.rows_that_fit(length)

    def full_length_batch(self, given: int | None, most: int | None = None, *, name: str = "a batch",
                          option: str = "the batch size") -> int:
        """Rows per batch of full-length responses (max_new_tokens each): `given`, else as many as
        the budget holds (at most `most`); a SpecrejError naming `option` when `given` does not fit."""
        length = self.sampling.max_new_tokens
        fits = self.rows_that_fit(length)
        rows = given or (fits if most is None else min(most, fits))
        if rows > fits:
            raise SpecrejError(f"{name} of {rows} x {length} tokens does not fit the memory budget ({fits} rows "
                               f"fit); lower {option} or raise the budget")
        return rows

    @property
    def next_round(self) -> int:
        """The index the next recorded decision gets (`record_round`): the round a halt names."""
        return len(self.rounds)

    @property
    def prompt_layer_states(self) -> torch.Tensor:
        """The prompt's last token's every-layer states [num_layer_states, hidden] (a batch started
        with layer_states=True first prefills them)."""
        if self.prefilled is None or self.prefilled.layer_states is None:
            raise SpecrejError("start a batch with layer_states=True before reading the prompt's layer states")
        return self.prefilled.layer_states

    # -- batches and decoding ---------------------------------------------------------------
    @typed_out_of_memory
    def start(self, rows: int, max_len: int | None = None, *, layer_states: bool = False,
              top_logprobs: int = 0) -> RolloutBatch:
        """A batch of `rows` new candidates sampling from the prompt, each with room for `max_len`
        tokens (default: as much as the budget gives each, at most max_new_tokens). The prompt is
        prefilled once, at the first batch. An earlier batch's cache is freed first: start a batch
        once the one before is done. `layer_states`: each step keeps its rows' every-layer states
        (`Batch.layer_states`); `top_logprobs` k: each step keeps the k largest log-probs of every
        row's distribution (`Batch.top_logprobs`)."""
        self._release()
        if self.prefilled is None:
            with self.clock.measure("generate"):
                self.prefilled = prefill(self.engine.forward, self.prompt_ids, layer_states)
        if self.first_batch is None:
            self.first_batch = rows
        self.max_rows = max(self.max_rows, rows)
        first = len(self.candidates)
        self.candidates += [Candidate(first + i) for i in range(rows)]
        max_len = self.budget.row_length(rows, self.sampling.max_new_tokens) if max_len is None else max_len
        certainty = reads_certainty(self.reward)
        rollout = self.engine.rollout(self.prefilled, rows, max_len, self.sampling, self.generator, first,
                                      top_k_logprobs=top_logprobs, token_certainty=certainty)
        if certainty:  # its per-row buffer and one copy read out, beside what Engine.memory_margin counts
            self.certainty_bytes = max(self.certainty_bytes, 2 * rows * self.sampling.max_new_tokens * 4)
        rollout.collect_layer_states = layer_states
        self.rollouts.append(rollout)
        return RolloutBatch(rollout)

    @typed_out_of_memory
    def decode(self, batch: RolloutBatch, until: Iterable[int] = ()) -> list[Candidate]:
        """Decode until every row is complete, the next token would not fit the budget (rows left
        live: memory ran short), or the length reaches one in `until` beyond the current one; the
        candidates completed on the way are returned."""
        rollout = batch.rollout
        with self.clock.measure("generate"):
            finished = decode_rollout(rollout, self.budget, set(until) - {rollout.length})
        return self._complete(finished)

    def make_room(self, batch: RolloutBatch) -> bool:
        """The batch's next step fits the budget (its rows are re-laid out if that is needed)."""
        return make_room(batch.rollout, self.budget)

    @typed_out_of_memory
    def step(self, batch: RolloutBatch) -> list[Candidate]:
        """One token for every live row (the next step must fit: `make_room`); the candidates it
        completed are returned."""
        if not self.make_room(batch):
            raise SpecrejError(f"no room for token {batch.length + 1} of {batch.num_rows} rows in the KV budget")
        with self.clock.measure("generate"):
            finished = batch.rollout.step()
        return self._complete(finished)

    def stop_layer_states(self, batch: RolloutBatch) -> None:
        """Later steps of the batch keep no every-layer states."""
        batch.rollout.collect_layer_states = False

    def live(self, batch: RolloutBatch) -> list[Candidate]:
        """The batch's live rows' candidates, their responses brought up to date."""
        rollout = batch.rollout
        self._update(rollout.partial_outputs(), complete=False)
        return [self.candidates[i] for i in rollout.candidate_ids.tolist()]

    @refuses("session.halt(rollout, candidates, round_index)",  # 0.1.0's call: a batch first, three arguments
             lambda *args, **kwargs: len(args) + len(kwargs) > 2 or bool(args) and isinstance(args[0], RolloutBatch))
    def halt(self, candidates: Iterable[Candidate], round_index: int) -> None:
        """Halt these candidates by decision `round_index`: a live row leaves its batch now (its KV
        row is freed by compaction; its response so far is kept), a complete response leaves the
        final set."""
        candidates = list(candidates)
        live_ids = [c.id for c in candidates if not c.complete and c.halted_round is None]
        if live_ids:  # their responses so far, detokenized only where `live` has not already
            outputs = self._current_rollout().halt(live_ids)
            self._update([o for o in outputs if len(o.token_ids) != self.candidates[o.candidate_id].num_tokens],
                         complete=False)
        for c in candidates:
            c.halted_round, c.complete = round_index, False

    def record_round(self, decision: Round) -> int:
        """Add a decision to the record; returns its index (the round a halt names)."""
        self.rounds.append(decision)
        return len(self.rounds) - 1

    def reserve(self, num_bytes: int) -> None:
        """Memory the method holds beside the KV budget (e.g. running sums): counted in the record's margin."""
        self.extra_bytes += num_bytes

    # -- scoring ----------------------------------------------------------------------------
    def answer(self, candidate: Candidate) -> str | None:
        """The answer in `candidate`'s response by the prompt's extract rule (`records.answers`)."""
        return extract_answer(candidate.text, self.answer_extract)

    @typed_out_of_memory
    def score_partial(self, candidates: Sequence[Candidate]) -> list[float]:
        """The reward of each candidate's response as it is now (a live row's so far)."""
        rollout = self._current_rollout(required=False)
        if rollout is not None and any(c.num_tokens != rollout.length for c in candidates
                                       if not c.complete and c.halted_round is None):
            self._update(rollout.partial_outputs(), complete=False)
        return self._score(candidates)

    @typed_out_of_memory
    def score_final(self, candidates: Sequence[Candidate]) -> list[float]:
        """The reward of each complete response; kept as its `final_score`."""
        scores = self._score(candidates)
        for c, s in zip(candidates, scores):
            c.final_score = s
        return scores

    def _score(self, candidates: Sequence[Candidate]) -> list[float]:
        if not candidates:
            return []
        with self.clock.measure("score"):
            scores = self.reward.score(self.prompt, [Response(c.text, c.token_ids, c.token_logprobs,
                                                              c.token_certainties) for c in candidates])
        self.scored_lengths += [c.num_tokens for c in candidates]
        # one warning per prompt: a broken reward would flood the log
        scores, nonfinite = finite_scores(scores, self.reward, repr(self.prompt[:60]), warn=not self.warned_nonfinite,
                                          stacklevel=3)
        self.warned_nonfinite |= nonfinite
        return scores

    # -- the record ---------------------------------------------------------------------------
    @typed_out_of_memory
    def finish(self, method: str, params: dict, run_params: Mapping = MappingProxyType({})) -> Result:
        """The run's result: every complete candidate scored, the batches' memory freed; its params
        are `record_params` of the method's `params`, the session's and the run's `run_params`."""
        self._release()
        self.score_final([c for c in self.candidates if c.complete and c.final_score is None])
        return Result(
            prompt=self.prompt, method=method, params=record_params(params, self, run_params),
            candidates=self.candidates, rounds=list(self.rounds),
            timing=self._timing(),
            tokens={"generated": sum(r.tokens_generated for r in self.rollouts), "scored": sum(self.scored_lengths)},
            peak_kv_bytes=max((r.cache.peak_bytes for r in self.rollouts), default=0),
            memory_margin_bytes=self.engine.memory_margin(len(self.prompt_ids), self.max_rows, self.sampling)
            + self.extra_bytes + self.certainty_bytes,
            flops=self._flops(),
            steps=profile([len(self.prompt_ids)] if self.prefilled is not None else [],
                          [r.step_runs for r in self.rollouts], self.scored_lengths),
        )

    def _timing(self) -> dict:
        """Wall-clock seconds (total_s: the whole run; generate_s: prefill and decoding; score_s:
        the reward), compute_s: the run's compute, which does not depend on the machine's other
        work (compute_clock: process_cpu, the process's CPU seconds over the run, or cuda_events,
        the device seconds of the generate and score parts: `engine.work_clock`), and threads:
        torch's CPU threads. A compiled engine's graphs loaded or compiled during the run are not
        its work: their wall seconds (`graphs_s`, named only when there were any) are left out of
        generate_s and compute_s (on a CPU their CPU seconds), as loading the model is."""
        wall, cpu = (now - before for now, before in zip(self.engine.graph_seconds(), self.graphs_before))
        graphs = {"graphs_s": wall} if wall else {}
        compute = self.clock.compute_s() - (cpu if self.clock.kind == CPU_CLOCK else wall)
        return {"total_s": time.perf_counter() - self.started, "generate_s": self.clock.wall_s("generate") - wall,
                "score_s": self.clock.wall_s("score"), "compute_s": compute,
                "compute_clock": self.clock.kind, "threads": torch.get_num_threads(), **graphs}

    def _flops(self) -> dict | None:
        """FLOPs of the work done (`flops` module's convention): the prefill once, each rollout's
        sampled tokens (one head each), fed tokens and attended positions, each scored response."""
        if self.shapes is None:
            return None
        shape, prompt_len = self.shapes.generator, len(self.prompt_ids)
        prefill_flops = flops.prefill_flops(shape, prompt_len, logits_positions=int(self.engine.forward_kind == "hf"))
        generate = sum(flops.decode_flops(shape, r.tokens_generated, r.tokens_fed, r.positions_attended)
                       for r in self.rollouts)
        reward = 0 if self.shapes.reward is None else sum(
            flops.reward_model_flops(self.shapes.reward, prompt_len + n) for n in self.scored_lengths)
        return {"prefill": prefill_flops, "generate": generate, "reward": reward,
                "total": prefill_flops + generate + reward}

    def _complete(self, finished: list[RowOutput]) -> list[Candidate]:
        self._update(finished, complete=True)
        return [self.candidates[o.candidate_id] for o in finished]

    def _update(self, outputs: list[RowOutput], complete: bool) -> None:
        """The candidates of `outputs` take their tokens, log-probs and text (and `complete`)."""
        texts = self.engine.detokenize([o.token_ids for o in outputs])
        for out, text in zip(outputs, texts):
            c = self.candidates[out.candidate_id]
            c.text, c.token_ids, c.token_logprobs = text, out.token_ids, out.token_logprobs
            c.token_certainties = out.token_certainties
            c.finished, c.complete = out.stopped, complete

    def _current_rollout(self, required: bool = True) -> Rollout | None:
        """The batch now sampling (the last started; an earlier one is released when a batch starts)."""
        rollout = self.rollouts[-1] if self.rollouts and not self.rollouts[-1].released else None
        if rollout is None and required:
            raise SpecrejError("no batch is sampling: start one before halting live rows")
        return rollout

    def _release(self) -> None:
        for rollout in self.rollouts:
            if not rollout.released:
                rollout.release()


def record_params(method_params: Mapping = MappingProxyType({}), session: Session | None = None,
                  run_params: Mapping = MappingProxyType({})) -> dict:
    """A trajectory record's params, built here alone, in the order a record holds them: what the
    method returned (its setting as it ran: e.g. n, and the batch that fit), then the session's
    (memory_budget, seed: the prompt's, the sampling settings, forward: which forward pass ran,
    llama | hf, and compiled: true only when the decode step was compiled, whose tokens differ
    from an eager run's, engine/compiled.py), then the run's `run_params` (`api.run_prompts`'
    model, reward, the run's seed, prompt format, setting, display, output settings and their
    digest, prompt_seed). A later part's value replaces an earlier one's in its place. A prompt
    that failed before its method returned has only the run's part."""
    params = dict(method_params)
    if session is not None:
        params.update({"memory_budget": session.memory_budget, "seed": session.seed, **asdict(session.sampling),
                       "forward": session.engine.forward_kind})
        if session.engine.compiled:
            params["compiled"] = True
    params.update(run_params)
    return params
