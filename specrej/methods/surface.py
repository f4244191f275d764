"""What a method sees, whole: `MethodSession` (one prompt's run, as `Method.run(session, params)`
gets it), `Batch` (rows sampling together, as `MethodSession.start` returns them), and the two
records a method reads and writes, `Candidate` (a response) and `Round` (a decision). A method
uses nothing else of the project's run; `session.Session` implements this surface, and the
built-in methods import only from `specrej.methods` (tests/test_layout.py checks it).
Torch-free at import: the tensors named below are torch's.

The surface is versioned with specrej (docs/methods.md, "The method surface"): a change to it
bumps the version and has a line in CHANGELOG.md, and each name it removed is in `REMOVED`, so
that a method written against an older version fails with one line naming what replaced it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..records.result import Candidate, Round

if TYPE_CHECKING:
    import torch

    from ..engine.sampling import SamplingParams

__all__ = ["Batch", "Candidate", "MethodSession", "Round"]

# Each spelling the surface removed -> (the version that removed it, what replaced it). `replaced`
# makes it one line; the session raises that line where an old spelling is used, and
# `prompt_run.call_run` rewrites Round's own TypeError for the old fields into it.
REMOVED: dict[str, tuple[str, str]] = {
    **{f"Round({name}=...)": ("0.2.0", f"Round(..., rule={{{name!r}: ...}})")
       for name in ("kept", "accepted", "cutoff", "memory_guard_halted")},
    "Round(decision_token, batch_before, batch_after, ranked, kept, accepted, cutoff, memory_guard_halted, rule)":
        ("0.2.0", "Round(decision_token, batch_before, batch_after, ranked=0, rule={...})"),
    "session.halt(rollout, candidates, round_index)": ("0.2.0", "session.halt(candidates, round_index)"),
    "session.has_room(rollout)": ("0.2.0", "session.make_room(batch)"),
    "rollout.collect_layer_states = False": ("0.2.0", "session.stop_layer_states(batch)"),
}


def replaced(old: str) -> str:
    """The one line for a removed spelling `old` (a key of `REMOVED`): what replaced it, and since when."""
    version, new = REMOVED[old]
    return f"{old} was replaced by {new} in specrej {version} (CHANGELOG.md)"


def refused(old: str) -> property:
    """A removed member of a class: reading or setting it raises `replaced(old)` (an AttributeError)."""

    def refuse(self, *value):
        raise AttributeError(replaced(old))

    return property(refuse, refuse, doc=f"Removed: {replaced(old)}.")


def refuses(old: str, called_so: Callable[..., bool]):
    """A decorator for a session's call that raises `replaced(old)` (a TypeError) when its arguments
    are the old call's (`called_so(*args, **kwargs)`); the call keeps its own signature."""

    def wrap(call):
        @functools.wraps(call)
        def checked(self, *args, **kwargs):
            if called_so(*args, **kwargs):
                raise TypeError(replaced(old))
            return call(self, *args, **kwargs)

        return checked

    return wrap


class Batch(Protocol):
    """Rows sampling continuations of the prompt in lock-step, read-only. Rows are the live rows,
    in one order that every per-row tensor shares; a row leaves when it completes or is halted."""

    @property
    def length(self) -> int: ...  # tokens sampled so far per live row

    @property
    def num_rows(self) -> int: ...  # live rows (0 once every row completed or was halted)

    @property
    def needs_room(self) -> bool: ...  # the next step writes past the rows' room (`make_room`)

    @property
    def candidate_ids(self) -> torch.Tensor: ...  # [rows] each row's `Candidate.id`

    @property
    def tokens(self) -> torch.Tensor: ...  # [rows, length] each row's sampled tokens

    @property
    def logprobs(self) -> torch.Tensor: ...  # [rows, length] their log-probs

    @property
    def sampled_ids(self) -> torch.Tensor | None: ...  # [rows'] the last step's rows as they sampled

    @property
    def top_logprobs(self) -> torch.Tensor | None:
        """[rows', k] with start(top_logprobs=k): the k largest log-probs of the last step's
        distributions, rows as `sampled_ids` (finished rows included)."""

    @property
    def layer_states(self) -> torch.Tensor | None:
        """[num_layer_states, rows, hidden] with start(layer_states=True): the last step's
        every-layer states of the live rows (None after rows were removed since)."""


class MethodSession(Protocol):
    """One prompt's run as a method drives it: start batches, decode, score, halt, record the
    decisions. The session keeps the candidates, the KV budget, the timers and the counts; every
    complete candidate left without a final score is scored when the run finishes."""

    # -- what the run is under --------------------------------------------------------------
    prompt: str  # the prompt's text
    prompt_id: int | str | None  # its id in the prompts file (None: a prompt run alone, `run_one`)
    prompt_ids: list[int]  # its token ids, rendered as the generator reads it
    sampling: SamplingParams  # temperature, top-p, top-k, max_new_tokens
    seed: int  # the prompt's seed: draw the method's own randomness from it
    memory_budget: int  # the KV budget in bytes

    @property
    def capacity(self) -> int: ...  # generated-token slots of KV (rows x tokens) beside the prompt

    def rows_that_fit(self, length: int) -> int: ...  # the most rows of `length` tokens each

    def full_length_batch(self, given: int | None, most: int | None = None, *, name: str = "a batch",
                          option: str = "the batch size") -> int:
        """Rows per batch of full-length responses: `given`, else as many as the budget holds (at
        most `most`); one message naming `option` when `given` does not fit."""

    @property
    def candidates(self) -> Sequence[Candidate]: ...  # every candidate started, indexed by its id

    @property
    def rounds(self) -> Sequence[Round]: ...  # the decisions recorded so far

    @property
    def next_round(self) -> int: ...  # the index the next `record_round` gets: the round a halt names

    @property
    def prompt_layer_states(self) -> torch.Tensor:
        """[num_layer_states, hidden]: the prompt's last token's every-layer states (after a batch
        started with layer_states=True)."""

    # -- batches and decoding -----------------------------------------------------------------
    def start(self, rows: int, max_len: int | None = None, *, layer_states: bool = False,
              top_logprobs: int = 0) -> Batch:
        """`rows` new candidates sampling from the prompt, each with room for `max_len` tokens
        (default: what the budget gives each, at most max_new_tokens); an earlier batch's cache
        is freed first. `layer_states` / `top_logprobs` k: each step keeps the rows' every-layer
        states / k largest log-probs (`Batch.layer_states`, `Batch.top_logprobs`)."""

    def decode(self, batch: Batch, until: Iterable[int] = ()) -> list[Candidate]:
        """Decode until every row completes, the KV budget is full (rows stay live) or the length
        reaches one in `until`; the candidates completed on the way."""

    def make_room(self, batch: Batch) -> bool: ...  # the next step fits the budget (re-laid out if needed)

    def step(self, batch: Batch) -> list[Candidate]: ...  # one token for every live row; those it completed

    def stop_layer_states(self, batch: Batch) -> None: ...  # later steps keep no layer states

    def live(self, batch: Batch) -> list[Candidate]: ...  # the live rows' candidates, responses up to date

    # -- scoring, halting, deciding -------------------------------------------------------------
    def score_partial(self, candidates: Sequence[Candidate]) -> list[float]:
        """The reward of each candidate's response as it is now (a live row's so far)."""

    def score_final(self, candidates: Sequence[Candidate]) -> list[float]:
        """The reward of each complete response, kept as its `final_score`."""

    def halt(self, candidates: Iterable[Candidate], round_index: int) -> None:
        """Halt them by decision `round_index`: a live row leaves its batch (its KV is freed, its
        response so far kept), a complete response leaves the final set."""

    def record_round(self, decision: Round) -> int: ...  # a decision in the record; returns its index

    def reserve(self, num_bytes: int) -> None: ...  # memory held beside the KV budget (the record's margin)

    def answer(self, candidate: Candidate) -> str | None:
        """The answer in a candidate's response as the prompt's `extract` rule finds it (first-number for
        a prompt without one), normalised as votes compare answers; None: it holds none."""
