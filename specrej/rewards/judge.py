"""A local instruct model as a pairwise judge: the torch side of ``analysis.winrate``'s ``local:<model>``.

``local_judge_completions`` is an alpaca_eval completion function (``fn_completions``): it takes
the formatted judge prompts and returns, per prompt, a completion shaped like OpenAI's chat
completion with ``logprobs`` / ``top_logprobs``, so alpaca_eval's own ``logprob_parser`` reads
the verdict exactly as it does for its weighted GPT-4-Turbo judge.  Each prompt is rendered with
the judge's chat template, the answer is started for it (``answer_prefix``) and the
``top_logprobs`` most likely next tokens after it are reported.  A verdict whose answer tokens
are not among them, or a prompt longer than the model's context, parses to NaN and alpaca_eval
counts it as unparsed.

alpaca_eval hands over a whole annotation chunk (up to 128 comparisons) per call; the prompts run
in right-padded batches sorted by length (``batch_tokens``), with logits only at each prompt's
last token: on a 2-core CPU about 2x less time per comparison than one prompt at a time, with
the same log-probs (float32, within 1e-4).

This module does not import alpaca_eval (only ``analysis.winrate`` does), and it loads models
through ``specrej.models.loading.load_generator``, so ``default``, hub ids, directories and .gguf work.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Sequence
from functools import lru_cache

import torch

from ..models.loading import load_generator

# Tokens per forward pass, padding included: ~10 judge prompts of ~400 tokens.  On a 2-core CPU,
# with SmolLM2-135M, 4096 was as fast as or faster than 2048 and 8192; activations stay small.
DEFAULT_BATCH_TOKENS = 4096
DEFAULT_MAX_BATCH_SIZE = 16  # also bounds the logits: batch × distinct last positions × vocabulary
_CHATML_TURN = re.compile(r"<\|im_start\|>([^\n]*)\n(.*?)<\|im_end\|>", re.DOTALL)


def load_judge(model: str, dtype: str = "auto", device: str = "auto"):
    """(model, tokenizer) of a judge, loaded once per process."""
    return _load_judge(model, dtype, device)  # positional, so every call shares one cache key


@lru_cache(maxsize=2)
def _load_judge(model: str, dtype: str, device: str):
    return load_generator(model, dtype=dtype, device=device, cpu_bfloat16=False)  # a scorer: see resolve_dtype


def chatml_to_messages(prompt: str) -> list[dict[str, str]]:
    """``<|im_start|>role\\ncontent<|im_end|>`` turns (alpaca_eval's prompt format) as chat messages;
    a prompt without such turns is one user message."""
    turns = [{"role": role.strip(), "content": content.strip()} for role, content in _CHATML_TURN.findall(prompt)]
    return turns or [{"role": "user", "content": prompt.strip()}]


def local_judge_completions(
    prompts: Sequence[str],
    model_name: str = "default",
    answer_prefix: str = "",
    top_logprobs: int = 5,
    dtype: str = "auto",
    device: str = "auto",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    **_ignored,
) -> dict[str, list]:
    """alpaca_eval ``fn_completions``: next-token log-probs of ``model_name`` after each prompt.

    Returns ``completions`` (the most likely next token, as text), ``completions_all`` (one dict
    per prompt: ``{"logprobs": {"content": [{"token", "logprob", "top_logprobs": [{"token",
    "logprob"}]}]}}``, tokens stripped of whitespace and merged by log-sum-exp), and
    ``time_per_example`` (its batch's time, shared among the batch's prompts) /
    ``price_per_example`` (0), all in the order of ``prompts``.

    Prompts run in batches (``_batches``): sorted by token length, right-padded, at most
    ``batch_tokens`` tokens (padding included) and ``max_batch_size`` prompts each; a prompt
    longer than ``batch_tokens`` runs alone.  The verdicts equal one-prompt-at-a-time ones.
    """
    model, tokenizer = load_judge(model_name, dtype, device)
    context = getattr(model.config, "max_position_embeddings", None)
    encoded = [_encode(tokenizer, prompt, answer_prefix) for prompt in prompts]
    completions_all: list[dict | None] = [None] * len(prompts)
    seconds = [0.0] * len(prompts)
    runnable = []
    for index, ids in enumerate(encoded):
        if not ids:
            completions_all[index] = _completion([], error="the prompt encodes to no tokens")
        elif context is not None and len(ids) >= context:
            error = f"prompt of {len(ids)} tokens exceeds the judge's context of {context}"
            completions_all[index] = _completion([], error=error)
        else:
            runnable.append(index)
    for batch in _batches([len(encoded[i]) for i in runnable], batch_tokens, max_batch_size):
        indices = [runnable[i] for i in batch]
        start = time.perf_counter()
        logprobs = _next_token_logprobs(model, [encoded[i] for i in indices])
        for row, index in enumerate(indices):
            completions_all[index] = _completion(_top_tokens(tokenizer, logprobs[row], top_logprobs))
        elapsed = (time.perf_counter() - start) / len(indices)
        for index in indices:
            seconds[index] = elapsed
    return {
        "completions": [entry["text"] for entry in completions_all],
        "completions_all": completions_all,
        "time_per_example": seconds,
        "price_per_example": [0.0] * len(prompts),
    }


def _batches(lengths: Sequence[int], batch_tokens: int, max_batch_size: int) -> list[list[int]]:
    """Indices into ``lengths``, longest first, grouped so that a batch padded to its longest
    prompt holds at most ``batch_tokens`` tokens and ``max_batch_size`` prompts (at least one)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        batch = batches[-1] if batches else None
        # longest first: a batch's first prompt sets its padded width
        if batch and len(batch) < max_batch_size and (len(batch) + 1) * lengths[batch[0]] <= batch_tokens:
            batch.append(index)
        else:
            batches.append([index])
    return batches


def _next_token_logprobs(model, rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """Log-probs (float32, ``len(rows)`` × vocabulary) of the token after each row of ids.

    Rows are right-padded with an attention mask: a causal model's logits at a row's last real
    token see only that row's tokens, at their own positions, as if it ran alone.  Logits are
    computed only at those last positions when the model takes ``logits_to_keep``."""
    lengths = torch.tensor([len(ids) for ids in rows])
    width = int(lengths.max())
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    attention_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    last = lengths - 1
    keep = last.unique()  # sorted positions shared by the batch (1-D: every transformers 5 model takes it)
    kwargs = {"logits_to_keep": keep.to(model.device)} if _takes_logits_to_keep(model) else {}
    with torch.inference_mode():
        inputs = {"input_ids": input_ids.to(model.device), "attention_mask": attention_mask.to(model.device)}
        logits = model(**inputs, use_cache=False, **kwargs).logits
        column = torch.searchsorted(keep, last) if kwargs else last
        logits = logits[torch.arange(len(rows), device=logits.device), column.to(logits.device)]
        return logits.float().log_softmax(-1).cpu()


def _takes_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _encode(tokenizer, prompt: str, answer_prefix: str) -> list[int]:
    messages = chatml_to_messages(prompt)
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text + answer_prefix, add_special_tokens=False)["input_ids"]
    text = "\n\n".join(message["content"] for message in messages)
    return tokenizer(f"{text}\n\n{answer_prefix}")["input_ids"]


def _top_tokens(tokenizer, logprobs: torch.Tensor, k: int) -> list[dict]:
    """The k most likely next tokens, whitespace-stripped; tokens that strip to the same text
    (``"1"`` and ``" 1"``) are merged, their probabilities added."""
    top = logprobs.topk(k)
    merged: dict[str, float] = {}
    for logprob, token_id in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        token = tokenizer.decode([token_id]).strip()
        merged[token] = _logaddexp(merged[token], logprob) if token in merged else logprob
    ranked = sorted(merged.items(), key=lambda item: -item[1])
    return [{"token": token, "logprob": logprob} for token, logprob in ranked]


def _completion(top: list[dict], error: str | None = None) -> dict:
    best = top[0] if top else {"token": "", "logprob": None}
    entry = {"text": best["token"], "logprobs": {"content": [{**best, "top_logprobs": top}]}}
    if error:
        entry["error"] = error
    return entry


def _logaddexp(a: float, b: float) -> float:
    high = max(a, b)
    return high + math.log(math.exp(a - high) + math.exp(b - high))
