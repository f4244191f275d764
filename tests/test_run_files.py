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
