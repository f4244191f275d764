"""Rewards: one interface for partial and complete responses.

    reward.score(prompt, responses) -> list[float]

`responses` are `Response`s (text, the generator's token ids, their log-probs and, for a reward
that reads them, their distributions' self-certainties), so a reward can use text (reward models,
Python callables) or the generator's own numbers (`logprob`, `self-certainty`).

Specs accepted by `load_reward` (and `--reward`):
  logprob                  mean token log-probability under the generator (paper §5.3)
  self-certainty           mean self-certainty of the generator's distributions (Kang et al. 2025)
  python:module:function   any callable (prompt, list[str]) -> list[float]
  <hub id or directory>    a sequence-classification reward model with a scalar output
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..errors import SpecrejError
from ..models.loading import check_revision, load_reward_model
from . import GENERATOR_REWARDS


@dataclass(frozen=True)
class Response:
    text: str
    token_ids: Sequence[int] = ()
    token_logprobs: Sequence[float] = ()
    token_certainties: Sequence[float] = ()  # filled only for a reward with reads_certainty


class Reward(Protocol):
    """`score` gives one float per response, larger better. A reward whose `reads_certainty` is
    True (an optional attribute, default False) is given each token's self-certainty, which the
    sampler then computes while it draws (`sampler.self_certainty`)."""

    name: str

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]: ...


def finite_scores(scores: Sequence[float], reward: Reward, prompt, *, warn: bool = True,
                  stacklevel: int = 1) -> tuple[list[float], bool]:
    """`scores` with NaN and +inf counted as -inf (a broken reward must not win a cut), and
    whether any was; unless `warn` is False, one warning naming the reward and `prompt` when
    any was. `stacklevel` as warnings.warn's, counted from the caller."""
    nonfinite = any(math.isnan(s) or s == math.inf for s in scores)
    if nonfinite and warn:
        warnings.warn(f"reward {getattr(reward, 'name', '?')} gave NaN/inf scores for prompt {prompt}; "
                      "they count as -inf", stacklevel=stacklevel + 1)
    return [s if math.isfinite(s) else float("-inf") for s in scores], nonfinite


class LogProbReward:
    """Average log-probability of the response's tokens under the generator (paper §5.3).

    Uses the log-probs the engine records while sampling: no extra forward pass.
    """

    name = "logprob"

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        return [math.fsum(r.token_logprobs) / len(r.token_logprobs) if r.token_logprobs else float("-inf")
                for r in responses]


class SelfCertaintyReward:
    """Self-certainty (Kang et al. 2025, "Scalable Best-of-N Selection for Large Language Models
    via Self-Certainty", eq. 3; code backprop07/Self-Certainty `confidence_logits`): the mean over
    the response's tokens of KL(U || p_t), the divergence from the uniform distribution over the
    vocabulary to the generator's untempered distribution p_t that token t was drawn from. It
    needs no reward model and no second forward pass: the sampler computes each KL from the logits
    it draws from (`Response.token_certainties`).

    Where it departs from the official code: that code runs the model again over prompt and
    response and averages the distributions at the response's positions, i.e. those that predict
    its tokens 2..n and the token after it; here the n distributions that drew tokens 1..n are
    averaged (the distribution after the last token drew the stop token, or none), which is also
    what a prefix of t tokens has, so a partial score is the mean over its t tokens."""

    name = "self-certainty"
    reads_certainty = True

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        if any(len(r.token_certainties) != len(r.token_ids) for r in responses):
            raise SpecrejError("the self-certainty reward needs each token's self-certainty: the responses were "
                               "sampled without them (a run's reward must be self-certainty while it samples)")
        return [math.fsum(r.token_certainties) / len(r.token_certainties) if r.token_certainties else float("-inf")
                for r in responses]


def reads_certainty(reward: Reward) -> bool:
    """Whether `reward` scores the generator's self-certainties (the sampler must keep them)."""
    return bool(getattr(reward, "reads_certainty", False))


class CallableReward:
    """Wraps any `fn(prompt, texts) -> scores`."""

    def __init__(self, fn: Callable[[str, list[str]], Sequence[float]], name: str | None = None):
        self.fn, self.name = fn, name or getattr(fn, "__name__", "callable")

    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        scores = [float(s) for s in self.fn(prompt, [r.text for r in responses])]
        if len(scores) != len(responses):
            raise SpecrejError(f"reward {self.name} returned {len(scores)} scores for {len(responses)} responses")
        return scores


class SequenceClassificationReward:
    """A reward model with a scalar head (AutoModelForSequenceClassification), batched.

    Each prompt + response is rendered with the reward model's *own* chat template and
    tokenizer, which often differ from the generator's. Custom-code models such as ArmoRM,
    whose output carries `.score`, load only with trust_remote_code=True. `revision`: the hub
    revision of a hub id, kept as `self.revision` (`api.run_prompts` records it).
    """

    def __init__(self, spec: str, *, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
                 revision: str | None = None, batch_size: int = 16, max_length: int = 4096):
        self.name, self.revision = spec, revision
        self.model, self.tokenizer = load_reward_model(spec, dtype, device, trust_remote_code, revision=revision)
        self.batch_size, self.max_length = batch_size, max_length
        if self.tokenizer.pad_token is None:  # batching needs a pad token; EOS is the usual choice
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side = "right"  # seq-cls heads read the last non-pad token
        self.tokens_processed = 0

    def render(self, prompt: str, response: str) -> str:
        if self.tokenizer.chat_template:
            conversation = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            return self.tokenizer.apply_chat_template(conversation, tokenize=False)
        return f"{prompt}\n\n{response}"

    @torch.inference_mode()
    def score(self, prompt: str, responses: Sequence[Response]) -> list[float]:
        """Scores in forward passes of `batch_size` responses: only that batch is tokenized and
        run at once, so the activations are bounded by batch_size x max_length tokens however
        many responses there are (SR's first pass scores b_init of them)."""
        texts = [self.render(prompt, r.text) for r in responses]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size], return_tensors="pt", padding=True, truncation=True,
                max_length=self.max_length, add_special_tokens=not self.tokenizer.chat_template,
            ).to(self.model.device)
            self.tokens_processed += int(batch["attention_mask"].sum())
            output = self.model(**batch)
            values = output.score if hasattr(output, "score") else output.logits
            values = values.float().reshape(values.shape[0], -1)
            if values.shape[1] != 1:
                raise SpecrejError(f"reward model {self.name} has {values.shape[1]} outputs; expected a scalar")
            scores += values[:, 0].tolist()
        return scores


def check_reward_revision(spec: str, revision: str | None) -> None:
    """Refuse a `revision` for a reward that is no hub id: logprob, a python: callable, a local
    reward model (`loading.check_revision`)."""
    if revision is not None and (spec in GENERATOR_REWARDS or spec.startswith("python:")):
        raise SpecrejError(f"--reward-revision {revision} pins a reward model's Hugging Face hub id, but {spec} is "
                           "no model: drop --reward-revision")
    check_revision(spec, revision, "reward")


def load_reward(spec: str, *, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False,
                revision: str | None = None, batch_size: int = 16) -> Reward:
    """The reward `spec` names (the module's docstring lists them). `trust_remote_code` and
    `revision` apply to a reward model alone (the generator's are `load_engine`'s)."""
    check_reward_revision(spec, revision)  # before the wrapping below: its message stands alone
    if spec == "logprob":
        return LogProbReward()
    if spec == "self-certainty":
        return SelfCertaintyReward()
    if spec.startswith("python:"):
        module_name, _, function_name = spec.removeprefix("python:").partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError, ValueError) as error:
            raise SpecrejError(f"reward {spec!r}: cannot import {function_name!r} from {module_name!r} ({error})") from error
        return CallableReward(fn, name=spec)
    try:
        return SequenceClassificationReward(spec, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                                            revision=revision, batch_size=batch_size)
    except SpecrejError as error:
        raise SpecrejError(
            f"unknown reward {spec!r}: expected 'logprob', 'self-certainty', 'python:module:function', or a reward model "
            f"id/directory ({error})"
        ) from error
