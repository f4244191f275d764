"""A local instruct model as a pairwise judge: the torch side of ``analysis.winrate``'s ``local:<model>``.

``local_judge_completions`` is an alpaca_eval completion function (``fn_completions``): it takes
the formatted judge prompts and returns, per prompt, a completion shaped like OpenAI's chat
completion with ``logprobs`` / ``top_logprobs``, so alpaca_eval's own ``logprob_parser`` reads
the verdict exactly as it does for its weighted GPT-4-Turbo judge.  One forward pass per prompt:
the prompt is rendered with the judge's chat template, the answer is started for it
(``answer_prefix``) and the ``top_logprobs`` most likely next tokens are reported.  A verdict
whose answer tokens are not among them, or a prompt longer than the model's context, parses to
NaN and alpaca_eval counts it as unparsed.

This module does not import alpaca_eval (only ``analysis.winrate`` does), and it loads models
through ``specrej.models.load_generator``, so ``default``, hub ids, directories and .gguf work.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from functools import lru_cache

import torch

from .models import load_generator

_CHATML_TURN = re.compile(r"<\|im_start\|>([^\n]*)\n(.*?)<\|im_end\|>", re.DOTALL)


def load_judge(model: str, dtype: str = "auto", device: str = "auto"):
    """(model, tokenizer) of a judge, loaded once per process."""
    return _load_judge(model, dtype, device)  # positional, so every call shares one cache key


@lru_cache(maxsize=2)
def _load_judge(model: str, dtype: str, device: str):
    return load_generator(model, dtype=dtype, device=device)


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
    **_ignored,
) -> dict[str, list]:
    """alpaca_eval ``fn_completions``: next-token log-probs of ``model_name`` after each prompt.

    Returns ``completions`` (the most likely next token, as text), ``completions_all`` (one dict
    per prompt: ``{"logprobs": {"content": [{"token", "logprob", "top_logprobs": [{"token",
    "logprob"}]}]}}``, tokens stripped of whitespace and merged by log-sum-exp), and
    ``time_per_example`` / ``price_per_example`` (0).
    """
    model, tokenizer = load_judge(model_name, dtype, device)
    context = getattr(model.config, "max_position_embeddings", None)
    completions, completions_all, seconds = [], [], []
    for prompt in prompts:
        start = time.perf_counter()
        ids = _encode(tokenizer, prompt, answer_prefix)
        if context is not None and len(ids) >= context:
            entry = _completion([], error=f"prompt of {len(ids)} tokens exceeds the judge's context of {context}")
        else:
            with torch.inference_mode():
                logits = model(torch.tensor([ids], device=model.device)).logits[0, -1]
            entry = _completion(_top_tokens(tokenizer, logits.float().log_softmax(-1), top_logprobs))
        completions_all.append(entry)
        completions.append(entry["text"])
        seconds.append(time.perf_counter() - start)
    return {
        "completions": completions,
        "completions_all": completions_all,
        "time_per_example": seconds,
        "price_per_example": [0.0] * len(prompts),
    }


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
