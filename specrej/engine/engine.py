"""The engine: a model's forward pass with its tokenizer, stop tokens and memory bounds.

Where things are (gpt-fast's layout): the forward pass in `llama.py` (Llama, Mistral, Qwen2, Qwen3) and `gemma3.py` (Gemma 3); any
other causal LM goes through its own forward and cache, `hf_forward.py`), the static KV cache in
`cache.py`, the sampling settings in `sampling.py`, and `prefill` / `decode_one_token` / `sample` /
`decode_rollout` with the per-row scheduler `Rollout` in `decoding.py` (which knows nothing of the
engine). `Engine` ties one model to them: it encodes prompts and detokenizes responses, knows the
stop tokens, decides how many rows go through the model at once, which bounds the memory a run
takes beside its KV budget, and makes the `Rollout`s that run with all of that (`Engine.rollout`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable

import torch

from ..errors import SpecrejError
from . import gemma3, llama
from . import sampler
from .compiled import CompiledForward
from .graph_build import compile_ranges
from .decoding import ForwardPass, PrefilledPrompt, Rollout
from .sampler import sampler_bytes
from .gemma3 import Gemma3Forward
from .hf_forward import HFForward
from .llama import LlamaForward
from .sampling import SamplingParams

logger = logging.getLogger("specrej")


# The engine's own forward passes, by model type (each module lists the types it runs); every
# other causal LM goes through the fallback.
FAST_PATHS = {**dict.fromkeys(llama.SUPPORTED_MODEL_TYPES, LlamaForward),
              **dict.fromkeys(gemma3.SUPPORTED_MODEL_TYPES, Gemma3Forward)}


def forward_pass(model) -> ForwardPass:
    """The forward pass for a Hugging Face causal LM: the engine's own for the architectures it
    knows (`FAST_PATHS`: `llama.LlamaForward` for Llama, Mistral, Qwen2, Qwen3;
    `gemma3.Gemma3Forward` for Gemma 3 text), else the fallback through the model's own forward
    and cache (`hf_forward.HFForward`), with one line in the log naming the model type."""
    model_type = model.config.model_type
    if model_type in FAST_PATHS:
        return FAST_PATHS[model_type](model.eval())
    logger.warning("specrej: %r is not one of the engine's own architectures (%s); decoding through "
                   "the model's own forward pass and cache (the fallback, slower)",
                   model_type, ", ".join(FAST_PATHS))
    try:
        return HFForward(model.eval())
    except SpecrejError:
        raise
    except Exception as error:  # a model whose forward the fallback cannot drive
        raise SpecrejError(f"cannot run {model_type!r} through its own forward pass: {error}") from error


class Engine:
    """A decoder-only LM with our own prefill/decode over a static cache."""

    def __init__(self, model, tokenizer, stop_token_ids: Iterable[int] = (), compile: str = "off"):
        """`compile`: auto, on or off, the decode step compiled or eager on each row range
        (`graph_build.compile_ranges`): compiled, the forward pass is wrapped
        (`compiled.CompiledForward`) and draws through its graph."""
        forward = forward_pass(model)
        ranges = compile_ranges(compile, forward)
        self._use(CompiledForward(forward, ranges) if ranges else forward)
        self.model, self.tokenizer, self.config = model, tokenizer, model.config
        self.layers = self.forward.layers
        self.device, self.dtype = self.forward.device, self.forward.dtype
        self.kv_bytes_per_token = self.forward.footprint.kv_bytes_per_token
        self.stop_token_ids = torch.tensor(sorted(set(stop_token_ids) | _eos_ids(model, tokenizer)), device=self.device)
        # Rows are sampled and decoded in chunks, so that the logits and activations of a step are
        # bounded (see memory_margin). A GPU wants large chunks (each chunk reads the weights
        # again); a CPU is compute-bound from a few dozen rows on.
        cuda = self.device.type == "cuda"
        self.sample_chunk_rows = max(1, (2**24 if cuda else 2**22) // self.forward.vocab_size)  # 64 / 16 MiB of fp32 logits
        self.decode_chunk_bytes = 2**30 if cuda else 2**26  # activations of one decode chunk (decode_row_bytes)

    def _use(self, forward) -> None:
        self.forward = forward
        self.compiled = isinstance(forward, CompiledForward)
        self.forward_kind = forward.kind  # "llama" or "hf": recorded in each result's params
        # how a step draws its tokens when nothing more is asked of the sampler
        self.draw_tokens = forward.draw if self.compiled else sampler.draw

    def with_forward(self, forward) -> Engine:
        """A copy of this engine (the same model, tokenizer and settings) that runs `forward`: e.g.
        `compiled.CompiledForward(...)` for its compiled step, or another forward pass to compare."""
        engine = copy.copy(self)
        engine._use(forward)
        return engine

    # -- text ----------------------------------------------------------------------------
    # How prompts are rendered (--prompt-format): "chat" = the tokenizer's chat template, one user
    # turn and the generation prompt; "plain" = the prompt text with the tokenizer's own special
    # tokens (BOS), as the paper prompts its base models; "auto" = chat when the tokenizer has a
    # template, else plain. Set per engine by `engine.load.load_engine`.
    PROMPT_FORMATS = ("auto", "chat", "plain")
    prompt_format = "auto"

    def used_prompt_format(self) -> str:
        """"chat" or "plain": how `encode_prompt` renders this engine's prompts."""
        if self.prompt_format == "auto":
            return "chat" if self.tokenizer.chat_template else "plain"
        return self.prompt_format

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of the prompt as `used_prompt_format` renders it."""
        if self.used_prompt_format() == "chat":
            if not self.tokenizer.chat_template:
                raise SpecrejError("--prompt-format chat: this model's tokenizer has no chat template "
                                   "(use plain or auto)")
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def detokenize(self, token_ids: list[list[int]]) -> list[str]:
        """Each row's token ids as text (special tokens skipped)."""
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)

    def check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        self.forward.check_fits(prompt_len, max_new_tokens)

    # -- decoding ----------------------------------------------------------------------------
    def rollout(self, prompt: PrefilledPrompt, rows: int, max_len: int, params: SamplingParams,
                generator: torch.Generator, first_candidate_id: int = 0, top_k_logprobs: int = 0,
                token_certainty: bool = False) -> Rollout:
        """`rows` rows sampling from `prompt` (from `prefill`) with this engine's forward pass, stop
        tokens and chunk sizes (as they are now: a rollout keeps them)."""
        return Rollout(self.forward, prompt, rows, max_len, params, generator, first_candidate_id,
                       stop_token_ids=self.stop_token_ids, sample_chunk_rows=self.sample_chunk_rows,
                       decode_chunk_bytes=self.decode_chunk_bytes, top_k_logprobs=top_k_logprobs,
                       token_certainty=token_certainty, draw_tokens=self.draw_tokens)

    def graph_seconds(self) -> tuple[float, float]:
        """Wall and CPU seconds this engine has spent loading or compiling its step's graphs so far
        (0 for an eager one): a run's record keeps them apart from its compute."""
        return (self.forward.graph_wall_s, self.forward.graph_cpu_s) if self.compiled else (0.0, 0.0)

    def memory_margin(self, prompt_len: int, rows: int, params: SamplingParams) -> int:
        """Bytes beside the KV budget that a prompt's run with at most `rows` rows may allocate
        (the bound that tests/test_memory.py checks the measured peak against):

        - decode: one chunk of rows' activations, at most max(decode_chunk_bytes, one row's);
        - sampling: `sampler_bytes` for one chunk of at most `sample_chunk_rows` rows (fp32
          [rows, vocab] copies: the logits, their tempered/sorted/soft-maxed/exponentiated copies,
          the int64 sort indices);
        - prefill: the prompt's activations (prompt_len rows) and its attention scores;
        - per row: the token-id and log-prob buffers [max_new_tokens] and one gathered copy of
          them (when responses are read out), three [hidden] states and a few ids and masks;
        - the footprint's `extra_cache_bytes`: 0 for the engine's own; for the fallback
          (`hf_forward.HFForward`) the prompt KV that its rows hold beside the budget
          (sliding-window layers' per-row copies, one layer in flight);
        - without chunked decode (`chunked_decode = False`, the fallback): a decode step over all rows.

        Not included: the reward model's pass (a reward model scores --reward-batch-size responses
        at a time, so its activations are bounded by that batch, not by the number of rows) and
        Python objects (token lists, texts).
        """
        context = prompt_len + params.max_new_tokens
        row = self.forward.footprint.decode_row_bytes(context)
        decode = min(rows * row, max(self.decode_chunk_bytes, row)) if self.forward.chunked_decode else rows * row
        extra = self.forward.footprint.extra_cache_bytes(prompt_len, rows)
        sampling = sampler_bytes(params, min(rows, self.sample_chunk_rows), self.forward.vocab_size)
        prefill = self.forward.footprint.prefill_bytes(prompt_len)
        per_row = 2 * 12 * params.max_new_tokens + 3 * 4 * self.forward.hidden_size + 128
        return decode + sampling + prefill + rows * per_row + extra


def _eos_ids(model, tokenizer) -> set[int]:
    ids = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        eos = getattr(source, "eos_token_id", None)
        ids |= set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    return ids
