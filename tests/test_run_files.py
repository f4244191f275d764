"""A run file is recognised before it is written: a file that is not one is refused and left as it
was, byte for byte; a bad line in the middle is named by its number and nothing after it is cut;
only a killed run's torn last line is dropped."""

import json

import pytest

from specrej.cli.main import main
from specrej.errors import SpecrejError
from specrej.records.io import RecordWriter, read_records


def record(prompt_id, **extra):
    return {"prompt_id": prompt_id, "prompt": "p", "method": "bon",
            "params": {"output_settings": {"method": "bon"}}, "error": "e", **extra}


def line(prompt_id) -> bytes:
    return (json.dumps(record(prompt_id)) + "\n").encode()


def test_generate_over_a_users_csv_refuses_and_leaves_it_byte_for_byte(generator_dir, tmp_path, capsys):
    prompts, out = tmp_path / "p.json", tmp_path / "results.csv"
    prompts.write_text(json.dumps(["List three fruits."]))
    table = b"model,score\nbon,0.5\nsr,0.7"  # no final newline: the last line is not a torn record either
    out.write_bytes(table)
    status = main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                   "--method", "bon", "--n", "2", "--max-new-tokens", "4", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and out.read_bytes() == table
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{out} is not a specrej run file (line 1 is not a record: 'model,score')" in err
    assert not (tmp_path / "results.csv.lock").exists()


@pytest.mark.parametrize("content", [b"[1, 2]\n", b'{"a": 1}\n', b"plain text", b"\xff\xfe\x00binary\n"])
def test_anything_but_records_is_refused_and_kept(tmp_path, content):
    path = tmp_path / "out.jsonl"
    path.write_bytes(content)
    with pytest.raises(SpecrejError, match=f"^{path} is not a specrej run file \\(line 1 is not a record"):
        RecordWriter(path, {"method": "bon"})
    assert path.read_bytes() == content


def test_a_bad_line_in_the_middle_is_named_and_nothing_after_it_is_cut(tmp_path):
    path = tmp_path / "run.jsonl"
    content = line(0) + line(1) + b"oops, an edit\n" + line(3) + line(4)
    path.write_bytes(content)
    for attempt in (read_records, lambda p: RecordWriter(p, {"method": "bon"})):
        with pytest.raises(SpecrejError, match=f"^{path} line 3 is not a specrej record \\('oops, an edit'\\); "
                                               "the file was left as it is"):
            attempt(path)
        assert path.read_bytes() == content  # the records after it still there


def test_only_a_torn_last_record_is_dropped(tmp_path):
    path = tmp_path / "run.jsonl"
    torn = line(2)[:25]
    path.write_bytes(line(0) + b"\n" + line(1) + torn)  # a blank line is passed over
    assert [r["prompt_id"] for r in read_records(path)] == [0, 1]
    with RecordWriter(path, {"method": "bon"}) as writer:
        assert writer.done == {0, 1}
        writer.write(record(2))
    assert path.read_bytes() == line(0) + b"\n" + line(1) + line(2)


def test_a_last_record_without_its_newline_is_kept_and_the_next_starts_a_line(tmp_path):
    path = tmp_path / "run.jsonl"
    compact = json.dumps(record(0), separators=(",", ":")).encode()  # not the writer's spelling: not torn
    path.write_bytes(compact)
    with RecordWriter(path, {"method": "bon"}) as writer:
        assert writer.done == {0}
        writer.write(record(1))
    assert path.read_bytes() == compact + b"\n" + line(1)


def generate_args(generator_dir, prompts, out, *extra):
    return ["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
            "--method", "bon", "--n", "2", "--max-new-tokens", "4", "--no-progress", *extra]


def test_a_resume_with_a_prompt_whose_text_changed_is_refused(generator_dir, tmp_path, capsys):
    prompts, out = tmp_path / "p.json", tmp_path / "run.jsonl"
    prompts.write_text(json.dumps([{"id": "sea", "prompt": "Write a poem about the sea."},
                                   {"id": "fruit", "prompt": "List three fruits."}]))
    assert main(generate_args(generator_dir, prompts, out)) == 0
    written = out.read_bytes()
    prompts.write_text(json.dumps([{"id": "sea", "prompt": "Write a poem about the sea."},
                                   {"id": "fruit", "prompt": "List three vegetables."}]))  # same id, new text
    capsys.readouterr()
    assert main(generate_args(generator_dir, prompts, out)) == 2
    err = capsys.readouterr().err
    assert err == (f"specrej: error: {out} holds prompt \"fruit\" with another text ('List three fruits.' there, "
                   "'List three vegetables.' now): the prompts changed since it was written; use another --out, "
                   "or delete it to rerun every prompt\n")
    assert out.read_bytes() == written


def test_a_resume_with_a_prompt_whose_answer_changed_is_refused(generator_dir, tmp_path, capsys):
    """The user's case (2026-12-06): the same ids, one reference answer changed; the run file
    would mix "7" with "10" and accuracy be computed against an answer the prompts file no longer holds."""
    prompts, out = tmp_path / "p.jsonl", tmp_path / "run.jsonl"

    def write_prompts(answer):
        prompts.write_text("".join(json.dumps(line) + "\n" for line in [
            {"prompt_id": "q1", "prompt": "Q: 3 + 4?\nA:", "answer": answer},
            {"prompt_id": "q2", "prompt": "Q: 5 + 5?\nA:", "answer": "10"}]))

    write_prompts("7")
    assert main(generate_args(generator_dir, prompts, out)) == 0
    written = out.read_bytes()
    assert [r["reference"]["answer"] for r in read_records(out)] == ["7", "10"]
    write_prompts("10")  # same id, new answer
    capsys.readouterr()
    assert main(generate_args(generator_dir, prompts, out)) == 2
    assert capsys.readouterr().err == (
        f"specrej: error: {out} holds prompt \"q1\" with another reference answer ('7' there, '10' now): its answer "
        "changed in the prompts file since it was written; use another --out, or delete it to rerun every prompt\n")
    assert out.read_bytes() == written
    write_prompts("7")  # the answer as it was: the resume goes on, with nothing left to run
    assert main(generate_args(generator_dir, prompts, out)) == 0
    assert out.read_bytes() == written


def answer_record(prompt_id, key, **extra):
    """A record as `specrej generate` writes it for a prompt with `key` (an AnswerKey or None)."""
    from specrej.records.answers import reference_digest

    return {**record(prompt_id), **({"reference": key.record()} if key else {}),
            "reference_digest": reference_digest(key), **extra}


def test_each_change_of_a_reference_is_refused_and_named(tmp_path):
    from specrej.records.answers import AnswerKey
    from specrej.records.prompts import PromptItem

    path = tmp_path / "run.jsonl"
    seven, exact = AnswerKey("7"), AnswerKey("7", check="exact")
    cases = [  # (the record's reference, the prompt's now, what the message says)
        (answer_record(0, seven), None, "'7' there, none now"),
        (answer_record(0, None), seven, "none there, '7' now"),
        (answer_record(0, seven), exact, "check 'numeric' there, check 'exact' now"),
        (answer_record(0, seven), AnswerKey("7", problem_set="set:b"),
         "problem_set None there, problem_set 'set:b' now"),
        ({**answer_record(0, seven), "reference": None}, AnswerKey("10"),  # an error record: its digest only
         "another in its error record there, '10' now"),
    ]
    for held, now, shown in cases:
        path.write_text(json.dumps(held) + "\n")
        with pytest.raises(SpecrejError, match=f"^{path} holds prompt 0 with another reference answer "
                                               f"\\({shown}\\): its answer changed in the prompts file"):
            RecordWriter(path, {"method": "bon"}, prompts=[PromptItem(0, "p", now)])
        assert path.read_text() == json.dumps(held) + "\n"
    for key in (None, seven, exact):  # the same reference: resumed
        path.write_text(json.dumps(answer_record(0, key)) + "\n")
        with RecordWriter(path, {"method": "bon"}, prompts=[PromptItem(0, "p", key)]) as writer:
            assert writer.done == {0}


def test_a_record_written_before_reference_digests_is_checked_by_its_reference(tmp_path):
    """Records before this change hold no reference_digest: one with its `reference` (every completed
    record of a prompt with an answer) is compared by it; one without (a failed prompt's, or a
    prompt that had no answer) cannot tell, and is resumed as before."""
    from specrej.records.answers import AnswerKey
    from specrej.records.prompts import PromptItem

    path = tmp_path / "run.jsonl"
    old = {key: value for key, value in answer_record(0, AnswerKey("7")).items() if key != "reference_digest"}
    path.write_text(json.dumps(old) + "\n")
    with pytest.raises(SpecrejError, match=r"holds prompt 0 with another reference answer \('7' there, '10' now\)"):
        RecordWriter(path, {"method": "bon"}, prompts=[PromptItem(0, "p", AnswerKey("10"))])
    with RecordWriter(path, {"method": "bon"}, prompts=[PromptItem(0, "p", AnswerKey("7"))]) as writer:
        assert writer.done == {0}
    path.write_text(json.dumps(record(0)) + "\n")  # an old error record: no reference, no digest
    with RecordWriter(path, {"method": "bon"}, prompts=[PromptItem(0, "p", AnswerKey("10"))]) as writer:
        assert writer.done == {0}


def test_a_compiled_resume_of_an_eager_file_is_refused_and_back(generator_dir, tmp_path, capsys):
    """Whether the step ran compiled is an output setting: it is known once the generator loads,
    and compared then, before any prompt runs."""
    from specrej.plan import ENGINE_SETTINGS

    prompts, out = tmp_path / "p.json", tmp_path / "run.jsonl"
    prompts.write_text(json.dumps(["Write a poem about the sea.", "List three fruits."]))
    assert main(generate_args(generator_dir, prompts, out, "--compile", "off")) == 0
    eager = read_records(out)
    assert "compiled" not in eager[0]["params"]["output_settings"]  # an eager record as before
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0])  # the second prompt still to run
    settings = eager[0]["params"]["output_settings"]
    known = {key: settings[key] for key in ENGINE_SETTINGS if key in settings}
    with RecordWriter(out, {**settings, "dtype": None, "device": None}, unknown=ENGINE_SETTINGS) as writer:
        with pytest.raises(SpecrejError, match=r"other settings \(compiled: the eager step there, the compiled "
                                               r"step now\); use another --out or delete it"):
            writer.settle({**known, "compiled": True})
    assert out.read_bytes() == lines[0]
    # the other way round: a compiled file resumed eagerly
    compiled_line = json.dumps({**eager[0], "params": {**eager[0]["params"],
                                                       "output_settings": {**settings, "compiled": True}}})
    out.write_text(compiled_line + "\n")
    with RecordWriter(out, {**settings, "dtype": None, "device": None}, unknown=ENGINE_SETTINGS) as writer:
        with pytest.raises(SpecrejError, match=r"compiled: the compiled step there, the eager step now"):
            writer.settle(known)
    # the same setting resumes: eager on eager
    out.write_bytes(lines[0])
    assert main(generate_args(generator_dir, prompts, out, "--compile", "off")) == 0
    assert read_records(out)[1]["prompt_id"] == 1


@pytest.mark.parametrize("prompt_id", [[1, 2], {"a": 1}, True, None, 1.5, ""])
def test_a_prompt_id_that_is_not_an_integer_or_a_string_is_refused_in_one_line(tmp_path, capsys, prompt_id):
    prompts, out = tmp_path / "p.jsonl", tmp_path / "run.jsonl"
    prompts.write_text(json.dumps({"prompt_id": prompt_id, "prompt": "List three fruits."}) + "\n")
    assert main(["generate", "--model", "default", "--method", "bon", "--n", "2",
                 "--prompts", str(prompts), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"specrej: error: {prompts}: entry 0: its prompt_id must be an integer or a non-empty string, "
                   f"got {json.dumps(prompt_id)}\n")
    assert not out.exists()
