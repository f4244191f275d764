"""Trajectories out as JSON Lines, one line per prompt, appended atomically (prompts in: `records.prompts`).

Trajectory record (one line per prompt; `Result.to_record` builds it):
  prompt_id, prompt, method (the method's record_method or name), params {..., model, reward,
  setting, display, output_settings, settings_digest},
  best {candidate_id, text, score, num_tokens},
  candidates [{id, text, token_ids, token_logprobs, num_tokens, finished, complete,
               final_score, halted_round, round_scores, [answer, correct]}], [reference (`answers`)],
  rounds [{decision_token, batch_before, batch_after, ranked, rule}],
  timing {total_s, generate_s, score_s, compute_s, compute_clock, threads}, tokens {generated, scored}, peak_kv_bytes,
  measured_peak_bytes, memory_margin_bytes, retries, flops {prefill, generate, reward, total},
  steps {prefill, decode, scored} (the engine's steps: `step_profile`)
or, for a prompt that failed: prompt_id, prompt, method, params, error; a prompt whose method
completed no response keeps the whole trajectory record (best null, its candidates, rounds,
timing and cost) with an error that starts "no complete response".
Scores of -inf are written as -Infinity (Python's json reads them back).

Also here, torch-free so that `analysis` can import it: the prefix table's column contract.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ..errors import SpecrejError
from .answers import reference_digest

# The prefix table (`specrej score-prefixes` writes it, analysis.correlation reads it): its columns
# in order and their dtypes. specrej/rewards/prefixes.py says what each column holds.
PREFIX_DTYPES = {"prompt_id": "str", "candidate_id": "int64", "tau": "int64", "partial_score": "float64",
                 "final_score": "float64", "num_tokens": "int64", "finished_before_tau": "bool"}
PREFIX_COLUMNS = tuple(PREFIX_DTYPES)


def read_records(path: str | os.PathLike) -> list[dict]:
    """Complete trajectory records of a JSONL file (a torn last line is ignored).

    A line that is not a record, or a prompt_id found twice (two runs appended to the same
    file), is an error naming the file.
    """
    return _unique(_complete_records(Path(path))[1], path)


def _unique(records: list[dict], path) -> list[dict]:
    seen = set()
    for record in records:
        key = json.dumps(record["prompt_id"])  # the id as written: 1 and "1" differ
        if key in seen:
            raise SpecrejError(f"{path} holds prompt {key} twice: two runs wrote to it at once; "
                               "rerun into a new file")
        seen.add(key)
    return records


# How every record line starts (`RecordWriter.write`: json.dumps of a record, prompt_id first):
# a last line cut short by a kill is recognised as ours by this prefix
RECORD_PREFIX = b'{"prompt_id": '


def _complete_records(path: Path) -> tuple[list[bytes], list[dict], int]:
    """The record lines of a run file, their records and the length of what precedes a torn
    tail (the file's size when it has none): the one read of a run file.

    Only what a killed run leaves is skipped: a last line without its newline that starts as a
    record does. Blank lines are passed over. Anything else that is not a record (a JSON object
    with a prompt_id) is refused in one line naming the file and the line, so that a file that is
    not a run file (a user's CSV) is never taken for one, and nothing after a bad line is lost."""
    if not path.exists():
        return [], [], 0
    if not path.is_file():
        raise SpecrejError(f"{path} is not a file; choose another --out")
    lines, records, end = [], [], 0
    data = path.read_bytes().splitlines(keepends=True)
    for number, line in enumerate(data, start=1):
        if number == len(data) and not line.endswith(b"\n") and line.startswith(RECORD_PREFIX):
            break  # the torn tail of a killed run
        end += len(line)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "prompt_id" not in record:
            raise SpecrejError(_not_a_record(path, number, line, records))
        lines.append(line)
        records.append(record)
    return lines, records, end


def _not_a_record(path: Path, number: int, line: bytes, before: list[dict]) -> str:
    """The one line refusing a file with a line that is not a specrej record, left as it is."""
    shown = _excerpt(line.decode("utf-8", "replace"), 40)
    if not before:
        return (f"{path} is not a specrej run file (line {number} is not a record: {shown!r}); "
                "it was left as it is: choose another --out")
    return (f"{path} line {number} is not a specrej record ({shown!r}); the file was left as it is: "
            "remove or fix that line, or choose another --out")


@contextmanager
def output_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold PATH.lock exclusively (flock) while writing PATH: two processes appending to one
    output would each run every prompt. A second holder is refused at once, with the pid of the
    first (a second `output_lock` of one PATH in the same process too: a run takes it once, when
    its `RecordWriter` opens). The lock goes when the process dies."""
    lock = os.path.realpath(f"{os.fspath(path)}.lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    while True:
        handle = open(lock, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip() or "unknown"
            handle.close()
            raise SpecrejError(f"another specrej process is writing {path} (pid {pid}); "
                               "wait for it or choose another --out") from None
        try:  # the holder we waited on may have removed the file we opened: then lock the new one
            if os.path.samestat(os.fstat(handle.fileno()), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        handle.close()
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    try:
        yield
    finally:
        os.unlink(lock)  # while still locked, so no one else can be holding this file
        handle.close()


def check_resume(path: str | os.PathLike, settings: dict, records: list[dict] | None = None,
                 unknown: Iterable[str] = ()) -> None:
    """Refuse to append to `path` when its records were made with other `settings` (every
    setting that changes the output, `plan.output_settings`; those in `unknown` are not known yet
    and not compared: `RecordWriter.settle` compares them once they are), naming the first one
    that differs, or saying that the method's code changed; records without settings (not
    written by `specrej generate`) are refused too."""
    records = read_records(path)[:1] if records is None else records
    for record in records:
        previous = record.get("params", {}).get("output_settings")
        if previous is None:
            raise SpecrejError(f"{path} holds records without params.output_settings, so a rerun cannot be checked "
                               "against them; use another --out")
        keys = [k for k in dict.fromkeys([*previous, *settings]) if k not in unknown]
        _refuse_changed(path, previous, settings, keys)


def _refuse_changed(path, previous: dict, settings: dict, keys: list[str]) -> None:
    """The comparison of a resume: SpecrejError unless `previous` and `settings` agree on `keys`."""
    changed = [k for k in keys if previous.get(k) != settings.get(k)]
    if changed == ["method_code"]:
        raise SpecrejError(_code_changed(path, settings, previous.get("method_code")))
    if changed:
        key = changed[0]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise SpecrejError(f"{path} holds results made with other settings ({key}: {_shown_setting(key, previous)} "
                           f"there, {_shown_setting(key, settings)} now{more}); use another --out or delete it")


def _shown_setting(key: str, settings: dict) -> str:
    """A setting's value as a refusal shows it (`compiled`, present only for a compiled step: which step)."""
    value = settings.get(key)
    return ("the compiled step" if value else "the eager step") if key == "compiled" else repr(value)


def _refuse_changed_prompts(path, records: list[dict], prompts: Iterable) -> None:
    """The prompts of a resume: SpecrejError naming the first prompt that `path` holds a record of
    under the same id but with another text, or with another reference answer (`_changed_reference`):
    the prompts file was edited since, and its records would be checked against answers it no
    longer holds."""
    held = {json.dumps(record["prompt_id"]): record for record in records}
    for item in prompts:
        record = held.get(json.dumps(item.prompt_id))
        if record is None:
            continue
        before = record.get("prompt")
        if before != item.prompt:
            raise SpecrejError(f"{path} holds prompt {json.dumps(item.prompt_id)} with another text "
                               f"({_excerpt(before)!r} there, {_excerpt(item.prompt)!r} now): the prompts changed "
                               "since it was written; use another --out, or delete it to rerun every prompt")
        changed = _changed_reference(record, getattr(item, "key", None))
        if changed:
            raise SpecrejError(f"{path} holds prompt {json.dumps(item.prompt_id)} with another reference answer "
                               f"({changed}): its answer changed in the prompts file since it was written; use "
                               "another --out, or delete it to rerun every prompt")


# a prompt without a reference, as `answers` reads its responses (votes extract the first number)
_NO_REFERENCE = {"answer": None, "extract": "first-number", "check": "numeric"}


def _changed_reference(record: dict, key) -> str | None:
    """How the reference a record was made with differs from `key` (the prompt's `answers.AnswerKey`
    now; None: it has none), as "<there> there, <now> now"; None when it does not, or cannot be told.

    A record written since records hold `reference_digest` (`answers.reference_digest`, null for a
    prompt without a reference, error records included) is compared by it. An older record has
    none: it is compared by its `reference`, which every completed record of a prompt with an
    answer holds; one without (a failed prompt's, or a prompt that had no answer) cannot tell and
    is let through, so that a resume of an older file goes on as before."""
    now = key.record() if key is not None else None
    before = record.get("reference")
    if "reference_digest" in record:
        if record["reference_digest"] == reference_digest(key):
            return None
        if before is None and record["reference_digest"] is not None:  # a failed prompt's record: a digest only
            return f"another in its error record there, {_shown_answer(now or _NO_REFERENCE)} now"
    elif before is None or before == now:
        return None
    before, now = before or _NO_REFERENCE, now or _NO_REFERENCE
    field = next((name for name in ("answer", "extract", "check", "problem_set") if before.get(name) != now.get(name)),
                 None)
    if field is None:  # the same fields: the task's entry that a reasoning-gym check reads
        return f"the same answer {_shown_answer(now)} with another task entry there than now"
    if field == "answer":
        return f"{_shown_answer(before)} there, {_shown_answer(now)} now"
    return f"{field} {before.get(field)!r} there, {field} {now.get(field)!r} now"


def _shown_answer(reference: dict) -> str:
    answer = reference.get("answer")
    return "none" if answer is None else repr(_excerpt(answer))


def _excerpt(text, width: int = 30) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _code_changed(path, settings: dict, before: str | None) -> str:
    """The one line refusing a resume whose method code (`registry.method_code`) differs."""
    method, now = settings.get("method"), settings.get("method_code")
    if before is None:
        what = "by a specrej that did not record its method's code"
    elif str(now).startswith("specrej "):
        what = f"by {before}, and this is {now}"
    else:
        what = f"by other code of method {method} (its module's source changed since)"
    return (f"{path} holds results made {what}; rerun into another --out, or delete {path} to rerun "
            "every prompt with this code")


class RecordWriter:
    """A run file, opened once per run: opening it takes `output_lock(path)` (held until `close()`
    or the end of a `with` block), repairs a torn tail (what a killed run left), reads the
    finished records and refuses a resume with other `settings` (`check_resume`), each once.
    Then it appends one JSON line per prompt, each in one write + fsync, so a killed run leaves
    only complete lines. `done` and `errors` say which prompts the file holds, and which failed.

    `unknown`: settings not known yet (`specrej generate` opens its output before the models
    load: their dtype, device and whether the step is compiled), compared by `settle` once they
    are. `prompts`: the run's prompts (`records.prompts.PromptItem`), each compared with the
    record the file holds under its id, so that a prompt whose text or reference answer changed
    is refused rather than answered by the old text's record or checked against the old answer.
    `retry_failed`: once every setting is checked, the error records are dropped (the file
    rewritten atomically), so their prompts run again.
    """

    def __init__(self, path: str | os.PathLike, settings: dict, retry_failed: bool = False,
                 unknown: Iterable[str] = (), prompts: Iterable = ()):
        self.path = Path(path)
        self.settings = dict(settings)
        self.unknown = tuple(unknown)  # the settings `settle` is still to compare
        with ExitStack() as stack:
            stack.enter_context(output_lock(self.path))
            lines, records, end = _complete_records(self.path)
            if self.path.exists():
                _end_at(self.path, end)
            records = _unique(records, self.path)
            check_resume(self.path, self.settings, records[:1], unknown=self.unknown)
            _refuse_changed_prompts(self.path, records, prompts)
            self._previous = records[0]["params"]["output_settings"] if records else None
            self.done = {record["prompt_id"] for record in records}
            self.errors = {record["prompt_id"]: record["error"] for record in records if "error" in record}
            # the lines --retry-failed keeps, until every setting is checked (None: nothing to drop)
            self._kept = ([line for line, record in zip(lines, records) if "error" not in record]
                          if retry_failed and self.errors else None)
            if not self.unknown:
                self._settled()
            self._lock = stack.pop_all()

    def settle(self, known: dict) -> dict:
        """The settings that were unknown when the writer opened, now known (`known`: e.g. the
        loaded engine's `plan.engine_settings`; an unknown setting missing from it is one this run
        does not have, such as `compiled` for an eager step), compared with the file's records as
        the others were (a setting known at opening must agree with its value then); then
        `retry_failed` applies. Returns every setting, in `plan.output_settings`' order."""
        for key, value in known.items():
            if key not in self.unknown and self.settings.get(key) != value:
                raise ValueError(f"{self.path} was opened for {key}={self.settings.get(key)!r}, not {value!r}")
        pending, self.unknown = self.unknown, ()
        for key in pending:
            if key in known:
                self.settings[key] = known[key]
            else:
                self.settings.pop(key, None)
        if self._previous is not None:  # check_resume compared the others at opening
            _refuse_changed(self.path, self._previous, self.settings, list(pending))
        self._settled()
        return self.settings

    def _settled(self) -> None:
        """Every setting checked: `retry_failed` drops the error records now, so their prompts run again."""
        if self._kept is not None:
            _replace_lines(self.path, self._kept)
            self.done -= set(self.errors)
            self.errors, self._kept = {}, None

    def write(self, record: dict) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        with open(self.path, "ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.done.add(record["prompt_id"])
        if "error" in record:
            self.errors[record["prompt_id"]] = record["error"]

    def close(self) -> None:
        self._lock.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _end_at(path: Path, end: int) -> None:
    """Drop a killed run's torn tail (after `end`), in place; end the last line with a newline."""
    if path.stat().st_size != end:
        os.truncate(path, end)
    if end:
        with open(path, "rb+") as handle:
            handle.seek(end - 1)
            if handle.read(1) != b"\n":
                handle.write(b"\n")


def _replace_lines(path: Path, lines: list[bytes]) -> None:
    """`path` holds exactly `lines` afterwards, replaced in one rename (a kill leaves the old file or the new)."""
    temporary = path.with_name(path.name + ".retry")
    with open(temporary, "wb") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
