"""The record of one prompt's run, as every method leaves it: its candidates, its decisions
(rounds), and the `Result` that becomes one JSON line (`Result.to_record`). Torch-free."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Candidate:
    """One response of a run, as the session keeps it (`Session.candidates[id]`). Its fields: `id`
    (its index in the run, in the order rows were started), `text`, `token_ids` and
    `token_logprobs` (the response: complete, or so far as of the last `live`, `score_partial` or `halt`),
    `token_certainties` (each token's distribution's self-certainty, kept when the reward reads them),
    `finished`, `complete`, `halted_round`, `round_scores` and `final_score` (see each field's comment);
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
    token_certainties: list[float] = field(default_factory=list)  # empty unless the reward reads them

    @property
    def num_tokens(self) -> int:
        """The response's tokens (a stop token that ended it is not among them)."""
        return len(self.token_ids)


@dataclass
class Round:
    """One decision of a run, as a method records it (`Session.record_round`) and the record keeps it
    (`rounds` in the trajectory record). Its common part: `decision_token` (tokens generated per live
    row at the decision), `batch_before` and `batch_after` (live rows before the decision and going
    on) and `ranked` (the responses the reward scored for it: 0 for a reward-free decision, whose
    halted rows have no score for it). The rest is the method's own, in `rule`: which rule, why
    (SR: eq. 4's cutoff, its rank `kept`, the `accepted` rows, the memory guard's halts), and
    "measures" (flat numbers) that feed the decisions table."""

    decision_token: int
    batch_before: int
    batch_after: int
    ranked: int = 0
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
    steps: dict | None = None  # the steps the engine ran: prefills, decode steps, scored responses (`step_profile`)

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
            if c.token_certainties:  # a record holds them only when they were kept
                record["token_certainties"] = [round(x, 5) for x in c.token_certainties]
            else:
                del record["token_certainties"]
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
            **({"steps": self.steps} if self.steps is not None else {}),
        }
