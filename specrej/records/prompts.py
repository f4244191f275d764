"""A prompts file read into `PromptItem`s: .json, .jsonl or .txt, each prompt with its id and,
for a problem with a reference answer, its `answers.AnswerKey`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecrejError
from .answers import AnswerKey, check_reference

# the fields of a prompt object that make its AnswerKey
ANSWER_FIELDS = ("answer", "extract", "check", "entry", "problem_set")


@dataclass(frozen=True)
class PromptItem:
    prompt_id: int | str
    prompt: str
    key: AnswerKey | None = None  # its reference answer and how responses are checked (None: it has none)


def read_prompts(path: str | os.PathLike) -> list[PromptItem]:
    """Prompts from .json (a list of objects with `prompt` or `instruction`, or of strings),
    .jsonl (one such object per line) or .txt (one prompt per non-blank line).

    An object's `prompt_id` or `id` names it; otherwise its position in the file does. An
    AlpacaFarm-style `input` field is appended to the instruction. A problem's `answer` (with
    `extract`, `check` and the task's `entry`: `answers.AnswerKey`) becomes its `key`; an answer
    that no response could match (empty, not a number for check numeric, not parsed by math-verify
    for check math: `answers.check_reference`) is refused, naming the entry.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecrejError(f"prompts file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecrejError(f"cannot read prompts file {path}: {error}") from error
    if path.suffix == ".txt":
        return [PromptItem(i, line) for i, line in enumerate(line for line in text.splitlines() if line.strip())]
    if path.suffix == ".json":
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as error:
            raise SpecrejError(f"{path} is not valid JSON: {error}") from error
        if not isinstance(entries, list):
            raise SpecrejError(f"{path} must hold a JSON list of prompts")
    elif path.suffix == ".jsonl":
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise SpecrejError(f"{path}:{number} is not valid JSON: {error}") from error
    else:
        raise SpecrejError(f"prompts file {path} must end in .json, .jsonl or .txt")
    items = [_prompt_item(entry, i, path) for i, entry in enumerate(entries)]
    ids = [item.prompt_id for item in items]
    if len(set(ids)) != len(ids):
        raise SpecrejError(f"{path} has duplicate prompt ids")
    return items


def _prompt_item(entry, index: int, path: Path) -> PromptItem:
    if isinstance(entry, str):
        return PromptItem(index, entry)
    if not isinstance(entry, dict) or not ({"prompt", "instruction"} & entry.keys()):
        raise SpecrejError(f"{path}: entry {index} has neither 'prompt' nor 'instruction'")
    prompt = entry.get("prompt", entry.get("instruction"))
    if not isinstance(prompt, str):
        raise SpecrejError(f"{path}: entry {index}: the prompt must be a string")
    if entry.get("input"):
        prompt = f"{prompt}\n\n{entry['input']}"
    prompt_id = entry.get("prompt_id", entry.get("id", index))
    if isinstance(prompt_id, bool) or not isinstance(prompt_id, (int, str)) or prompt_id == "":
        key = "prompt_id" if "prompt_id" in entry else "id"
        raise SpecrejError(f"{path}: entry {index}: its {key} must be an integer or a non-empty string, "
                           f"got {json.dumps(prompt_id)}")
    return PromptItem(prompt_id, prompt, _answer_key(entry, index, path))


def _answer_key(entry: dict, index: int, path: Path) -> AnswerKey | None:
    """The prompt's AnswerKey from its answer fields (None: it has none)."""
    if not any(name in entry for name in ANSWER_FIELDS):
        return None
    answer = entry.get("answer")
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, (str, int, float))):
        raise SpecrejError(f"{path}: entry {index}: its answer must be a string or a number, got {json.dumps(answer)}")
    fields = {name: entry[name] for name in ("extract", "check", "problem_set") if name in entry}
    try:
        key = AnswerKey(None if answer is None else str(answer), **fields, entry=entry.get("entry"))
        check_reference(key)  # an answer no response could match: refused before any model loads
        return key
    except SpecrejError as error:
        raise SpecrejError(f"{path}: entry {index}: {error}") from None
