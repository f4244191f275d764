"""The record of one prompt's run, as every method leaves it: its candidates, its decisions
(rounds), and the `Result` that becomes one JSON line (`Result.to_record`). Torch-free."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Candidate:
    """One response of a run, as the session keeps it (`Session.candidates[id]`). Its fields: `id`
    (its index in the run, in the order rows were started), `text`, `token_ids` and
    `token_logprobs` (the response so far: complete, or up to the last `Session.live`), `finished`,
    `complete`, `halted_round`, `round_scores` and `final_score` (see each field's comment);
    `num_tokens` is len(token_ids)."""

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
        """The response's tokens (a stop token that ended it is not among them)."""
        return len(self.token_ids)


@dataclass
class Round:
    """One decision of a run, as a method records it (`Session.record_round`) and the record keeps it
    (`rounds` in the trajectory record). Its fields: `decision_token` (tokens generated per live row
    at the decision), `batch_before` and `batch_after` (live rows before the cut and going on),
    `ranked` (the rows eq. 3 ranks: live rows plus the responses completed since the last round; 0
    when no reward was used), `kept` (the cutoff's rank), `accepted` (the rows scoring at or above
    the cutoff, ties included), `cutoff` (the score cut at, or None), `memory_guard_halted`
    (accepted live rows halted because they did not fit the budget) and `rule` (the rule's own
    record: which rule, why this cutoff; its "measures", flat numbers, feed the decisions table)."""

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
    # the rule's record: which rule, why this cutoff; "measures" (flat numbers) feed the decisions table
    rule: dict = field(default_factory=dict)


@dataclass
class Result:
    prompt: str
    method: str
    params: dict
    candidates: list[Candidate]
    rounds: list[Round]
    # total_s, generate_s (prefill + decode), score_s: wall-clock; compute_s (compute_clock: process_cpu |
    # cuda_events): the run's compute; threads: torch's CPU threads (Session._timing)
    timing: dict
    tokens: dict  # generated (sampled tokens, all rows), scored (response tokens given to the reward)
    peak_kv_bytes: int  # computed: the peak of the allocated KV cache (its storages), transients included
    memory_margin_bytes: int = 0  # what the run may allocate beside the KV budget (Engine.memory_margin + the method's)
    measured_peak_bytes: int | None = None  # measured: budget.PeakMemory around the run (None: not measured)
    retries: int = 0  # out-of-memory retries with a halved batch (`run_method`); the final batch is in params
    flops: dict | None = None  # counted as the work happened: prefill, generate, reward, total (None: shape unknown)

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
            "flops": self.flops,
        }
