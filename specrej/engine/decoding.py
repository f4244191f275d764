"""The decode loop, gpt-fast style: `prefill`, `decode_one_token`, `sampler.sample` (the draw and
what is read off each distribution), `decode_rollout` (a rollout stepped as far as it goes) as free
functions over explicit tensors, and `Rollout`, the per-row scheduler they drive.

A row's room is the tokens its cache holds (`RowCache.max_len`): `Rollout.needs_room` says the next
step would write past it, `Rollout.relayout` lays the cache out again with more, and `make_room`
does that when the budget allows.

The prompt is prefilled once and its KV shared by every row; rows decode in lock-step, and
finished or halted rows are pruned out of the cache and all per-row state in place (no
re-prefill, no re-tokenisation). The model is anything that implements `ForwardPass`
(`llama.LlamaForward` for the architectures the engine knows, `hf_forward.HFForward` for any
other causal LM); a `Rollout` gets that forward pass, the stop tokens and the chunk sizes, and
nothing else (`engine.Engine.rollout` hands them over).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..errors import SpecrejError
from ..records.step_profile import add_step, step_variant
from .budget import Footprint, TokenBudget
from .cache import compaction_order, moved_rows
from .sampler import draw, sample
from .sampling import SamplingParams


class PromptState(Protocol):
    """A prefilled prompt's KV as the forward pass that ran it holds it (`ForwardPass.forward_prompt`),
    for that forward pass's own `RowCache.share_prompt`: `cache.PromptKV` (per-layer k and v) for
    `llama.LlamaForward`, `hf_forward.HFPromptCache` (the model's own cache object) for the
    fallback. Opaque to the decode loop, and never modified: every batch of a prompt shares it."""

    @property
    def prompt_len(self) -> int: ...


class RowCache(Protocol):
    """The per-row KV cache a `ForwardPass` decodes into (`cache.KVCache`): the prompt's KV shared,
    each row's own KV preallocated, rows pruned and re-laid out in place."""

    rows: int  # live rows: the leading rows of the buffers
    peak_bytes: int  # the most its storages (prompt KV included) ever held, transients included

    @property
    def max_len(self) -> int: ...  # generated tokens each row has room for

    @property
    def prompt_len(self) -> int: ...

    def share_prompt(self, prompt: PromptState) -> None: ...  # the state its own forward pass's forward_prompt made

    def allocate(self, rows: int, max_len: int) -> None: ...

    def prune(self, order: torch.Tensor) -> None: ...  # keep rows `order` (new row j is old row order[j])

    def relayout(self, max_len: int) -> None: ...  # room for max_len tokens per live row

    def free(self) -> None: ...


class ForwardPass(Protocol):
    """What `prefill`, `decode_one_token` and `sampler.sample` need from a model: the prompt, the
    step and the logits, and its `footprint` (`budget.Footprint`: the bytes the memory budget
    counts). `llama.LlamaForward` implements it; a fallback for any causal LM implements the same
    (`engine.forward_pass` picks one for a model; `compiled.CompiledForward` compiles its step). `hidden` [rows, H] is each row's
    state that `logits` turns into next-token logits (H = hidden_size for the lm_head input);
    `Rollout` index-selects it when rows are pruned, as it does the cache."""

    # which forward pass runs, for the records (a result's params["forward"]): "llama" (the
    # engine's own: `llama.LlamaForward`, `gemma3.Gemma3Forward`) or "hf" (the fallback, `hf_forward.HFForward`)
    kind: str
    # forward_step takes any chunk of the cache's rows (first_row > 0); False: all live rows in one
    # call, so a decode step's activations grow with the rows (`Engine.memory_margin` counts them)
    chunked_decode: bool
    device: torch.device
    dtype: torch.dtype
    layers: Sequence  # the decoder layers; len(layers) is what the KV budget counts
    hidden_size: int
    vocab_size: int
    footprint: Footprint  # its KV per token and activations, for the memory budget
    # entries of a position's every-layer states (transformers' output_hidden_states: the embedding
    # output, each layer's, the final normed state), for methods that read them (`Rollout.layer_states`)
    num_layer_states: int

    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None: ...  # SpecrejError if not

    def new_cache(self) -> RowCache: ...

    def forward_prompt(self, token_ids: torch.Tensor, layer_states: torch.Tensor | None = None
                       ) -> tuple[PromptState, torch.Tensor]:
        """token_ids [1, P] -> the prompt's KV (a `PromptState` that this forward pass's
        `RowCache.share_prompt` takes) and the hidden state of its last token [1, H].
        `layer_states` [num_layer_states, 1, H], if given, receives that token's every-layer states."""

    def forward_step(self, cache: RowCache, tokens: torch.Tensor, pos: int, first_row: int = 0,
                     layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [rows, 1] at generated position `pos` for the cache's rows first_row...: writes
        their KV into `cache`, returns their hidden states [rows, H]; `layer_states`
        [num_layer_states, rows, H], if given, receives their every-layer states."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor: ...  # fp32 [rows, vocab]


@dataclass
class PrefilledPrompt:
    token_ids: list[int]
    state: PromptState  # the prompt's KV, as its forward pass holds it (`RowCache.share_prompt` takes it)
    hidden: torch.Tensor  # [hidden] final hidden state of the last prompt token (lm_head input)
    layer_states: torch.Tensor | None = None  # [num_layer_states, hidden] of that token, if asked for


@torch.inference_mode()
def prefill(model: ForwardPass, prompt_ids: list[int], layer_states: bool = False) -> PrefilledPrompt:
    """Run the prompt once (batch 1); its KV is then shared by every row that samples from it.
    `layer_states`: keep its last token's every-layer states too."""
    states = _layer_buffer(model, 1) if layer_states else None
    state, hidden = model.forward_prompt(torch.tensor([prompt_ids], device=model.device), states)
    return PrefilledPrompt(list(prompt_ids), state, hidden[0], None if states is None else states[:, 0])


def _layer_buffer(model: ForwardPass, rows: int) -> torch.Tensor:
    if not model.num_layer_states:
        raise SpecrejError(f"the {model.kind} forward pass of this model gives no per-layer hidden states")
    return torch.empty(model.num_layer_states, rows, model.hidden_size, dtype=model.dtype, device=model.device)


def decode_chunk_rows(model: ForwardPass, chunk_bytes: int, context_len: int) -> int:
    """Rows fed through the model at once in a decode step with `context_len` tokens of KV: as many
    as keep their activations (`model.footprint.decode_row_bytes`) within `chunk_bytes`, at least one; all
    rows for a forward pass without chunked decode (the fallback)."""
    if not model.chunked_decode:
        return 2**62
    return max(1, chunk_bytes // model.footprint.decode_row_bytes(context_len))


@torch.inference_mode()
def decode_one_token(model: ForwardPass, cache: RowCache, tokens: torch.Tensor, pos: int,
                     chunk_rows: int, layer_states: torch.Tensor | None = None) -> torch.Tensor:
    """Feed each live row's token at generated position `pos`; returns the hidden states that
    predict the next token, [rows, hidden]. Rows go through the model `chunk_rows` at a time,
    so a step's activations stay bounded however many rows there are. `layer_states`
    [num_layer_states, rows, hidden], if given, receives every layer's state of each row."""
    hidden = [model.forward_step(cache, tokens[start : start + chunk_rows, None], pos, start,
                                 None if layer_states is None else layer_states[:, start : start + chunk_rows])
              for start in range(0, tokens.shape[0], chunk_rows)]
    return hidden[0] if len(hidden) == 1 else torch.cat(hidden)


@dataclass
class RowOutput:
    candidate_id: int
    token_ids: list[int]  # generated tokens, stop token excluded
    token_logprobs: list[float]
    stopped: bool  # ended with a stop token (else: still running, halted, or at max_new_tokens)
    token_certainties: list[float] = field(default_factory=list)  # each token's distribution's self-certainty, if kept


class Rollout:
    """Rows sampling continuations of one prefilled prompt in lock-step.

    Per-row state (candidate id, tokens, log-probs, next-token hidden state) lives in tensors whose
    first dimension is the row, and is pruned together with the KV cache. With
    `collect_layer_states` set, each step also keeps its rows' every-layer states of the token it
    fed (`layer_states`, [num_layer_states, rows, hidden]); off, the decode loop does no extra work.

    A method sees a rollout only through `methods.session.RolloutBatch` (`methods.surface.Batch`):
    `length`, `num_rows`, `needs_room`, `candidate_ids` ([rows], each row's candidate id), `tokens`
    and `logprobs` ([rows, max_new_tokens], valid up to `length`), `sampled_ids` and `top_logprobs`
    (the last step's rows as they sampled, and with `top_k_logprobs` their k largest log-probs) and
    `layer_states`; the session drives the rest.
    """

    def __init__(self, model: ForwardPass, prompt: PrefilledPrompt, rows: int, max_len: int,
                 params: SamplingParams, generator: torch.Generator, first_candidate_id: int = 0, *,
                 stop_token_ids: torch.Tensor | None = None, sample_chunk_rows: int | None = None,
                 decode_chunk_bytes: int | None = None, top_k_logprobs: int = 0, token_certainty: bool = False,
                 draw_tokens=draw):
        """`model` samples `rows` rows from `prompt` (which it prefilled), each with room for
        `max_len` tokens in the cache; a row ends on one of `stop_token_ids` or at
        params.max_new_tokens. `sample_chunk_rows` rows' logits are made at a time, and a decode
        step feeds the rows in chunks of `decode_chunk_rows(model, decode_chunk_bytes, ...)`.
        `top_k_logprobs` > 0: each step keeps the k largest log-probs of every row's distribution
        (`top_logprobs`); 0 computes nothing of the kind. `token_certainty`: each step keeps the
        self-certainty of every row's distribution (`RowOutput.token_certainties`); off, nothing
        of the kind is computed. `draw_tokens`: how a step draws its tokens and their log-probs when
        nothing more is asked (`sampler.draw`, or a compiled engine's graph)."""
        if stop_token_ids is None or sample_chunk_rows is None or decode_chunk_bytes is None:
            raise TypeError("Rollout needs stop_token_ids, sample_chunk_rows and decode_chunk_bytes")
        self.model, self.params, self.generator, self.draw_tokens = model, params, generator, draw_tokens
        self.stop_token_ids = stop_token_ids
        self.sample_chunk_rows, self.decode_chunk_bytes = sample_chunk_rows, decode_chunk_bytes
        self.cache = model.new_cache()
        self.cache.share_prompt(prompt.state)
        self.cache.allocate(rows, max_len)
        device = model.device
        self.candidate_ids = torch.arange(first_candidate_id, first_candidate_id + rows, device=device)
        self.tokens = torch.zeros(rows, params.max_new_tokens, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(rows, params.max_new_tokens, dtype=torch.float32, device=device)
        self.certainties = (torch.zeros(rows, params.max_new_tokens, dtype=torch.float32, device=device)
                            if token_certainty else None)
        self.hidden = prompt.hidden.expand(rows, -1)
        self.length = 0  # tokens sampled per live row
        # work done, for the FLOP count: tokens sampled (one head each), tokens fed through the
        # layers, and the positions those fed tokens attended to (prompt, earlier tokens, itself)
        self.tokens_generated = self.tokens_fed = self.positions_attended = 0
        # the steps it ran, for eq. 7's compute (`records.step_profile`): runs of steps alike in
        # rows sampled, rows fed and variant, at consecutive contexts
        self.step_runs: list[list] = []
        # each step's variant (`records.step_profile.step_variant`), by whether it keeps every layer's states
        self.variants = {layers: step_variant(params.temperature, params.top_k, params.top_p, top_logprobs=top_k_logprobs > 0,
                                              certainty=token_certainty, layer_states=layers) for layers in (False, True)}
        self.top_k_logprobs = top_k_logprobs
        # the last step's rows as they sampled (before finished rows left) and, with top_k_logprobs,
        # the k largest log-probs of the distribution each sampled from
        self.sampled_ids: torch.Tensor | None = None
        self.top_logprobs: torch.Tensor | None = None
        self.released = False
        self.collect_layer_states = False
        # the last step's every-layer states of the live rows (rows as candidate_ids); None when not
        # collected, or when rows were removed since
        self.layer_states: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        """Live rows: those still sampling (0 once every row finished or was halted)."""
        return self.candidate_ids.numel()

    @property
    def needs_room(self) -> bool:
        """The next step would write past the cache's preallocated length."""
        return self.length + 1 > self.cache.max_len

    def step(self) -> list[RowOutput]:
        """Sample one token for every row; return the rows that finished (stop token or length)."""
        tokens, logprobs, self.top_logprobs, certainties = sample(
            self.model, self.hidden, self.params, self.generator, self.sample_chunk_rows, self.top_k_logprobs,
            self.certainties is not None, self.draw_tokens)
        self.sampled_ids = self.candidate_ids
        self.tokens[:, self.length] = tokens
        self.logprobs[:, self.length] = logprobs
        if certainties is not None:
            self.certainties[:, self.length] = certainties
        self.length += 1
        rows_sampled = self.num_rows
        self.tokens_generated += rows_sampled
        stopped = torch.isin(tokens, self.stop_token_ids)
        done = stopped | (self.length == self.params.max_new_tokens)
        finished = self._remove(done, stopped) if done.any() else []
        context = self.cache.prompt_len + self.length  # the positions each fed row attends to
        if self.num_rows:
            pos = self.length - 1
            chunk_rows = decode_chunk_rows(self.model, self.decode_chunk_bytes, context)
            states = _layer_buffer(self.model, self.num_rows) if self.collect_layer_states else None
            self.hidden = decode_one_token(self.model, self.cache, self.tokens[:, pos], pos, chunk_rows, states)
            self.layer_states = states
            self.tokens_fed += self.num_rows
            self.positions_attended += self.num_rows * context
        add_step(self.step_runs, rows_sampled, self.num_rows, context, self.variants[self.collect_layer_states])
        return finished

    def partial_outputs(self) -> list[RowOutput]:
        """The live rows' responses so far."""
        return self._outputs(torch.arange(self.num_rows, device=self.model.device), None)

    def halt(self, candidate_ids: Iterable[int]) -> list[RowOutput]:
        """Remove these candidates' rows (their KV rows compacted away); returns their outputs so far."""
        halted = torch.isin(self.candidate_ids, torch.tensor(list(candidate_ids), device=self.model.device))
        return self._remove(halted, None)

    def relayout(self, max_len: int) -> None:
        """Re-lay the cache out with room for `max_len` tokens per row."""
        self.cache.relayout(max_len)

    def release(self) -> None:
        """Free the KV cache and the per-row buffers once no row is live (counters stay)."""
        self.cache.free()
        self.candidate_ids = self.candidate_ids.new_empty(0)
        self.tokens = self.logprobs = self.certainties = self.hidden = self.layer_states = None
        self.released = True

    def _outputs(self, rows: torch.Tensor, stopped: torch.Tensor | None) -> list[RowOutput]:
        ids = self.candidate_ids[rows].tolist()
        tokens = self.tokens[rows, : self.length].tolist()
        logprobs = self.logprobs[rows, : self.length].tolist()
        ended = stopped[rows].tolist() if stopped is not None else [False] * len(ids)
        certainties = (self.certainties[rows, : self.length].tolist() if self.certainties is not None
                       else [[]] * len(ids))
        return [
            RowOutput(c, t[:-1] if s else t, lp[:-1] if s else lp, s, sc[:-1] if s else sc)
            for c, t, lp, s, sc in zip(ids, tokens, logprobs, ended, certainties)
        ]

    def _remove(self, remove: torch.Tensor, stopped: torch.Tensor | None) -> list[RowOutput]:
        removed = self._outputs(remove.nonzero().flatten(), stopped)
        self.layer_states = None
        order = compaction_order(~remove)
        self.candidate_ids = self.candidate_ids[order]
        self.hidden = self.hidden[order]
        # the token and log-prob buffers are compacted in place (only the rows that move are
        # copied), like the cache: a gathered copy would double them for the moment
        self.tokens, self.logprobs = _compact(self.tokens, order), _compact(self.logprobs, order)
        if self.certainties is not None:
            self.certainties = _compact(self.certainties, order)
        self.cache.prune(order)
        return removed


def make_room(rollout: Rollout, budget: TokenBudget) -> bool:
    """True when the rollout's next step fits the budget. When its cache is full but the next
    token still fits, the rows are re-laid out first, with as much room as the budget gives each."""
    if not rollout.needs_room:
        return True
    if not budget.fits(rollout.num_rows, rollout.length + 1):
        return False
    rollout.relayout(budget.row_length(rollout.num_rows, rollout.params.max_new_tokens))
    return True


def decode_rollout(rollout: Rollout, budget: TokenBudget, stop_at: Container[int] = frozenset()) -> list[RowOutput]:
    """Step `rollout` until every row is complete, the next token would not fit `budget`, or its
    length reaches one in `stop_at`; returns the rows that finished (stop token or max_new_tokens)."""
    finished: list[RowOutput] = []
    while rollout.num_rows and rollout.length not in stop_at and make_room(rollout, budget):
        finished += rollout.step()
    return finished




def _compact(buffer: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """buffer's rows `order` as its first rows, in place; returns the view of those rows."""
    src, dst = moved_rows(order)
    if src.numel():
        buffer[dst] = buffer[src]
    return buffer[: order.numel()]
