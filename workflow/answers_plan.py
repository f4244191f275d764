"""The accuracy study's plan: problem sets, prompts with reference answers drawn from a seeded
generator (reasoning-gym), as the lines of a prompts file (`prompts.source: reasoning-gym`,
`prompts.problems`: the plan reads the same lines to digest each chunk, rule problem_set writes
them); and the runs and the ladder its analysis reads."""

from __future__ import annotations

import hashlib
import json

REASONING_GYM = "reasoning-gym"  # prompts.source of a problem set drawn from reasoning-gym (prompts.problems)


class ProblemSetError(ValueError):
    """`prompts.problems` that reasoning-gym refuses, in one line naming the key."""


def problem_set_lines(problems: dict) -> list[dict]:
    """The lines of the prompts file of `prompts.problems` (validated, its defaults filled): one
    per problem of reasoning-gym's dataset `task` (`settings`, `size`, `seed`), {prompt_id (its
    index), prompt, answer, extract, check, entry (the task's own record), problem_set}.

    With `shots` k > 0 the prompt is k solved problems of the same task, "Q: <question>\nA:
    <answer>" blocks, then "Q: <question>\nA:"; with none it is the question alone. The shots
    come from the dataset with seed `seed + size`: reasoning-gym draws item i from seed + i, so
    that seed continues the stream past the set's own problems; a shot that repeats one of
    them is skipped all the same. `problem_set` is a digest of the spec and of the lines, so
    records tell which set a problem came from."""
    problems = {**PROBLEM_DEFAULTS, **problems}
    key = json.dumps(problems, sort_keys=True)
    if key not in _PROBLEM_SETS:
        _PROBLEM_SETS[key] = _problem_set_lines(problems)
    return [dict(line) for line in _PROBLEM_SETS[key]]


# the schema's defaults of prompts.problems (the config has them filled; a caller of its own may not)
PROBLEM_DEFAULTS = {"settings": {}, "seed": 0, "shots": 0, "extract": "first-number", "check": "reasoning-gym"}
_PROBLEM_SETS: dict[str, list[dict]] = {}  # one generation per spec and process: the plan asks more than once


def _problem_set_lines(problems: dict) -> list[dict]:
    try:
        import reasoning_gym
    except ImportError:
        raise ProblemSetError(f"prompts.source {REASONING_GYM} needs the reasoning-gym package: "
                          "pip install -e '.[answers]'") from None
    task, settings, size, seed, shots = (problems[k] for k in ("task", "settings", "size", "seed", "shots"))

    def dataset(size: int, seed: int) -> list[dict]:
        try:
            entries = reasoning_gym.create_dataset(task, size=size, seed=seed, **settings)
            return [json.loads(json.dumps(entry, default=str)) for entry in entries]  # as the prompts file keeps it
        except (ValueError, TypeError, KeyError, AssertionError) as error:  # how reasoning-gym refuses a config
            raise ProblemSetError(f"prompts.problems: reasoning-gym refuses task {task!r} with "
                              f"settings {settings}: {type(error).__name__}: {error}") from None

    entries = dataset(size, seed)
    questions = {entry["question"] for entry in entries}
    examples = []
    for entry in dataset(size + shots, seed + size) if shots else []:
        if entry["question"] not in questions | {e["question"] for e in examples} and len(examples) < shots:
            examples.append(entry)
    if len(examples) < shots:
        raise ProblemSetError(f"prompts.problems.shots: only {len(examples)} of {shots} solved "
                          f"examples of {task!r} differ from the set's {size} problems")
    preamble = "".join(f"Q: {e['question']}\nA: {e['answer']}\n\n" for e in examples)
    lines = [{"prompt_id": index, "prompt": f"{preamble}Q: {entry['question']}\nA:" if shots else entry["question"],
              "answer": str(entry["answer"]), "extract": problems["extract"], "check": problems["check"],
              "entry": entry} for index, entry in enumerate(entries)]
    spec = {key: problems[key] for key in ("task", "settings", "size", "seed", "shots")}
    digest = hashlib.sha256(json.dumps([spec, lines], sort_keys=True).encode()).hexdigest()[:16]
    return [{**line, "problem_set": f"{task}-{digest}"} for line in lines]


def answer_fields(source) -> dict:
    """A prompt's answer fields as the plan's digest reads them, from a prompts line (dict) or a
    `specrej.records.answers.AnswerKey`."""
    get = source.get if isinstance(source, dict) else lambda name: getattr(source, name, None)
    return {name: get(name) for name in ("answer", "extract", "check", "entry", "problem_set")}


def check_problems(config: dict):
    """Yield one message per problem with `prompts.problems`: missing for the reasoning-gym
    source, given for another, or a task or settings that reasoning-gym refuses."""
    prompts = config["prompts"]
    if prompts["source"] != REASONING_GYM:
        if prompts.get("problems") is not None:
            yield (f"prompts.problems: read only with prompts.source: {REASONING_GYM} (prompts.source is "
                   f"{prompts['source']!r}; a prompts file carries its answers on its own lines)")
        return
    if prompts.get("problems") is None:
        yield f"prompts.problems: required with prompts.source: {REASONING_GYM} (task, settings, size, seed, shots)"
        return
    try:
        problem_set_lines(prompts["problems"])
    except ProblemSetError as error:
        yield str(error)


def ladder_ks(ladder: list[int]) -> list[int]:
    """The k of the accuracy study's SC@k / BoN@k ladder: 1, 2, 4, ... up to the largest N, and
    every N of the reference's ladder."""
    top = max(ladder)
    return sorted({*(2 ** i for i in range(top.bit_length()) if 2 ** i <= top), *ladder})
