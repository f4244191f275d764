"""Problems with reference answers: a response's answer extracted and checked (one function per
kind), and the selection rules that read answers rather than the reward. Torch-free: `analysis`
computes every rule over recorded candidates with the same functions.

A prompt with a reference (`AnswerKey`, from a prompts file's `answer`, `extract`, `check` and
`entry` fields, and the `problem_set` it came from) has, in its record, `reference` {answer, extract, check} and, for every completed
candidate, `answer` (the extracted answer, normalised, or None) and `correct`.

Extraction (`extract`):
  first-number   the first number of the response (a few-shot "A: 17" answer, before the model goes on)
  last-number    the last number (a chain of thought that ends with its result)
  boxed          the content of the last \\boxed{...} (MATH-style answers)
  first-line     the response's first non-blank line, stripped
Checking (`check`):
  numeric        equal as exact rationals (17 = 17.0 = 34/2)
  exact          equal as stripped text
  math           math-verify's equivalence of the two expressions (the `answers` extra)
  reasoning-gym  the task's own scorer (`reasoning_gym.get_score_answer_fn` of the prompt's `entry`),
                 correct when it gives full credit (the `answers` extra)
Selection (`select`):
  reward         eq. 6: the highest final score (the methods' own choice)
  vote           majority vote over the extracted answers (self-consistency, Wang et al. 2023): the
                 most frequent answer; ties go to the answer whose best response scores highest
  weighted-vote  each answer weighted by its responses' summed softmax of the final scores
                 (exp(score - max score)): the reward-weighted vote
A vote returns the highest-scoring response that gives the winning answer; with no answer
extracted from any response it falls back to the reward's choice. A method whose own vote is
another (DeepConf: confidence-weighted, over the traces its filter keeps) records its weights
(`vote_weights`), and its vote is that one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ..errors import SpecrejError

EXTRACTS = ("first-number", "last-number", "boxed", "first-line")
CHECKS = ("numeric", "exact", "math", "reasoning-gym")
SELECT_RULES = ("reward", "vote", "weighted-vote")

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


@dataclass(frozen=True)
class AnswerKey:
    """A prompt's reference answer and how a response's answer is found and checked against it
    (`extract`, `check`: see the module's table); `entry` is the task's own record for a check
    that needs it (reasoning-gym's scorer); `problem_set` names the set it was drawn from (the
    workflow writes a digest of the generator's settings and of the set)."""

    answer: str | None
    extract: str = "first-number"
    check: str = "numeric"
    entry: Mapping | None = field(default=None, compare=False)
    problem_set: str | None = None

    def __post_init__(self):
        if self.extract not in EXTRACTS:
            raise SpecrejError(f"extract must be one of {', '.join(EXTRACTS)}, got {self.extract!r}")
        if self.check not in CHECKS:
            raise SpecrejError(f"check must be one of {', '.join(CHECKS)}, got {self.check!r}")
        if self.check == "reasoning-gym" and not (isinstance(self.entry, Mapping) and "metadata" in self.entry):
            raise SpecrejError("check reasoning-gym needs the task's entry (question, answer, metadata) in `entry`")

    def record(self) -> dict:
        """The record's `reference`: the answer and how responses are checked against it."""
        return {"answer": self.answer, "extract": self.extract, "check": self.check,
                **({"problem_set": self.problem_set} if self.problem_set else {})}


def reference_digest(key: AnswerKey | None) -> str | None:
    """The record's `reference_digest`: a digest of everything that marks a response right or wrong
    for the prompt (its `reference`, `AnswerKey.record`, and the task's `entry` for a reasoning-gym
    check, whose scorer reads it); None for a prompt without a reference. Every record
    `specrej generate` writes holds it, error records too, so that a resume can refuse a prompt whose
    reference changed since (`records.io`)."""
    if key is None:
        return None
    shown = {**key.record(), **({"entry": key.entry} if key.check == "reasoning-gym" else {})}
    text = json.dumps(shown, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_reference(key: AnswerKey) -> None:
    """SpecrejError when no response could ever be marked right against `key`'s answer, so that a
    prompts file with such an answer is refused before a model loads rather than run with every
    candidate wrong: an empty answer, one that check numeric cannot read as a number, one that
    math-verify cannot parse (check math; it needs the `answers` extra, as the check does). A key
    without an answer (None: no reference) and a reasoning-gym check (the task's own scorer) pass."""
    answer = key.answer
    if answer is None:
        return
    if not answer.strip():
        raise SpecrejError("its answer is empty, so every response would be marked wrong; give the reference "
                           "answer, or leave out `answer` for a prompt without one")
    if key.check == "numeric" and _number(answer) is None:
        raise SpecrejError(f"its answer {answer!r} is not a number, which check numeric (the default) needs, so "
                           "every response would be marked wrong; give a number, or another check (exact, math)")
    if key.check == "math" and not _math_parses(answer):
        raise SpecrejError(f"its answer {answer!r} cannot be parsed by math-verify (check math), so every response "
                           "would be marked wrong; give the answer as a LaTeX expression math-verify reads, or "
                           "another check (exact)")


def extract_answer(text: str, extract: str) -> str | None:
    """The answer of a response by `extract` (None: the response holds none)."""
    if extract in ("first-number", "last-number"):
        numbers = _NUMBER.findall(text)
        if not numbers:
            return None
        return _normal_number(numbers[0] if extract == "first-number" else numbers[-1])
    if extract == "boxed":
        return _last_boxed(text)
    if extract == "first-line":
        return next((line.strip() for line in text.splitlines() if line.strip()), None)
    raise SpecrejError(f"extract must be one of {', '.join(EXTRACTS)}, got {extract!r}")


def _normal_number(text: str) -> str:
    """A number as votes compare it: no thousands separators, 17.0 as 17, 0.50 as 0.5."""
    text = text.replace(",", "")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return text
    if value.denominator == 1:
        return str(value.numerator)
    decimal = f"{float(value):.15g}"
    return decimal if Fraction(decimal) == value else f"{value.numerator}/{value.denominator}"


def _last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced (None: no complete one)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for position in range(begin, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            if depth == 0:
                return text[begin:position].strip()
            depth -= 1
    return None


def check_answer(answer: str | None, key: AnswerKey) -> bool:
    """Whether an extracted `answer` is the reference's (`key.check`); no answer is wrong."""
    if answer is None or key.answer is None:
        return False
    if key.check == "numeric":
        number = _number(answer)
        return number is not None and number == _number(str(key.answer))
    if key.check == "exact":
        return answer.strip() == str(key.answer).strip()
    if key.check == "math":
        return _math_equivalent(answer, str(key.answer))
    return _reasoning_gym_score(answer, key.entry) >= 1.0


def _number(text: str) -> Fraction | None:
    """`text` as check numeric reads it: an exact rational, thousands separators dropped (None: not a number)."""
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _math_verify():
    """math-verify's module (the `answers` extra), or the SpecrejError that says how to install it."""
    try:
        import math_verify
    except ImportError as error:
        raise SpecrejError(f"check math needs math-verify: pip install -e '.[answers]' ({error})") from None
    return math_verify


def _math_equivalent(answer: str, reference: str) -> bool:
    math_verify = _math_verify()
    return bool(math_verify.verify(math_verify.parse(f"${reference}$"), math_verify.parse(f"${answer}$")))


def _math_parses(reference: str) -> bool:
    """Whether math-verify reads `reference` (as `_math_equivalent` gives it) as an expression, not
    only as the text it falls back to. Its parse times out by SIGALRM, which only the main thread
    may set: in another thread it parses without a timeout rather than fail."""
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    return bool(_math_verify().parse(f"${reference}$", fallback_mode="no_fallback", parsing_timeout=timeout))


def _reasoning_gym_score(answer: str, entry: Mapping) -> float:
    try:
        import reasoning_gym
    except ImportError as error:
        raise SpecrejError(f"check reasoning-gym needs reasoning-gym: pip install -e '.[answers]' ({error})") from None
    score = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
    return float(score(answer, dict(entry)))


def select(answers: Sequence[str | None], scores: Sequence[float], rule: str) -> int | None:
    """The index of the response `rule` selects among completed responses with extracted
    `answers` and final `scores` (None: no response). `reward` is eq. 6 (ties: the first)."""
    if rule not in SELECT_RULES:
        raise SpecrejError(f"select must be one of {', '.join(SELECT_RULES)}, got {rule!r}")
    if rule == "reward":
        return max(range(len(scores)), key=lambda i: (_finite(scores[i]), -i), default=None)
    if rule == "vote":
        return weighted_vote(answers, [1.0] * len(answers), scores)
    top = max((_finite(s) for a, s in zip(answers, scores) if a is not None), default=-math.inf)
    weights = [math.exp(_finite(s) - top) if math.isfinite(top) else 1.0 for s in scores]
    return weighted_vote(answers, weights, scores)


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float], scores: Sequence[float]) -> int | None:
    """The answer with the largest summed weight over the responses that give it (ties: the answer
    whose best response scores highest), as the index of its highest-scoring response; with no
    answer at all, the highest score's (None: no response). Majority vote is unit weights; DeepConf's
    vote weighs each trace by its confidence."""
    voted = [i for i, answer in enumerate(answers) if answer is not None]
    if not voted:
        return max(range(len(scores)), key=lambda i: (_finite(scores[i]), -i), default=None)
    weight: dict[str, float] = {}
    best: dict[str, int] = {}
    for i in voted:
        answer = answers[i]
        weight[answer] = weight.get(answer, 0.0) + weights[i]
        if answer not in best or (_finite(scores[i]), -i) > (_finite(scores[best[answer]]), -best[answer]):
            best[answer] = i
    winner = max(weight, key=lambda a: (weight[a], _finite(scores[best[a]]), -best[a]))
    return best[winner]


def vote_weights(record: Mapping) -> dict[int, float] | None:
    """The weights of a method's own vote, when its record declares one (a decision's
    `rule.vote_weights`, {candidate id: weight}: DeepConf's confidence-weighted vote over the traces
    its filter keeps); None: a plain majority vote."""
    for decision in reversed(record.get("rounds") or []):
        weights = (decision.get("rule") or {}).get("vote_weights")
        if weights is not None:
            return {int(cid): float(weight) for cid, weight in weights.items()}
    return None


def _finite(score: float | None) -> float:
    """A score as selection orders it: None and NaN lowest."""
    return -math.inf if score is None or score != score else score


def answered_candidates(candidates: list[dict], key: AnswerKey | None, extract: str) -> list[dict]:
    """`candidates` (record dicts) with `answer` on every completed one (by `extract`) and, when
    the prompt has a reference (`key`), `correct`; the others unchanged."""
    out = []
    for candidate in candidates:
        if candidate.get("complete"):
            answer = extract_answer(candidate.get("text") or "", extract)
            candidate = {**candidate, "answer": answer}
            if key is not None and key.answer is not None:
                candidate["correct"] = check_answer(answer, key)
        out.append(candidate)
    return out
