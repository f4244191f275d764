"""`specrej generate` end to end on the tiny models: records, bad input, resume."""

import json

import pytest

from specrej.cli import main
from specrej.io import read_records


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "16", "--memory-budget", "64MiB", "--no-progress", *extra])


def test_round_trip_bon_and_sr(generator_dir, reward_model_dir, prompts_file, tmp_path):
    out = tmp_path / "bon.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "6", "--batch-size", "4",
                    "--reward", str(reward_model_dir)) == 0
    records = read_records(out)
    assert [r["prompt_id"] for r in records] == [0, 1, 2]
    for r in records:
        assert r["method"] == "bon" and r["params"]["n"] == 6 and r["params"]["model"] == str(generator_dir)
        assert len(r["candidates"]) == 6 and r["rounds"] == []
        assert r["best"]["score"] == max(c["final_score"] for c in r["candidates"])
        assert set(r["timing"]) == {"total_s", "generate_s", "score_s"} and r["tokens"]["generated"] > 0
        assert 0 < r["peak_kv_bytes"] <= 64 * 2**20
        best = next(c for c in r["candidates"] if c["id"] == r["best"]["candidate_id"])
        assert best["text"] == r["best"]["text"] and len(best["token_ids"]) == r["best"]["num_tokens"]

    sr_out = tmp_path / "sr.jsonl"
    assert generate(generator_dir, prompts_file, sr_out, "--method", "sr", "--alpha", "0.5", "--batch-size", "16",
                    "--decision-tokens", "4,8") == 0
    for r in read_records(sr_out):
        assert r["params"]["alpha"] == 0.5 and r["params"]["init_batch_size"] == 16
        assert [x["decision_token"] for x in r["rounds"]][:1] == [4]
        assert any(c["halted_round"] is not None for c in r["candidates"])


@pytest.mark.parametrize("args, message", [
    (["--method", "sr", "--alpha", "1.0"], "--alpha must be in [0, 1)"),
    (["--method", "sr", "--alpha", "-0.1"], "--alpha must be in [0, 1)"),
    (["--method", "bon", "--n", "0"], "--n must be >= 1"),
    (["--method", "bon", "--n", "2", "--reward", "nonsense:spec"], "unknown reward"),
])
def test_bad_settings_exit_2_with_one_clear_message(generator_dir, prompts_file, tmp_path, capsys, args, message):
    assert generate(generator_dir, prompts_file, tmp_path / "out.jsonl", *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_missing_model_path(prompts_file, tmp_path, capsys):
    assert generate(tmp_path / "no-such-model", prompts_file, tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 2
    assert "model path not found" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, message", [
    ("p.json", "[{\"prompt\": \"a\"", "not valid JSON"),
    ("p.json", "{\"prompt\": \"a\"}", "JSON list"),
    ("p.json", "[{\"text\": \"a\"}]", "neither 'prompt' nor 'instruction'"),
    ("p.jsonl", "{\"prompt\": \"a\"}\nnot json\n", "p.jsonl:2"),
    ("p.csv", "a,b", "must end in .json, .jsonl or .txt"),
])
def test_malformed_prompt_files(generator_dir, tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    assert generate(generator_dir, path, tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 2
    assert message in capsys.readouterr().err


def test_unreadable_prompt_file(generator_dir, tmp_path, capsys):
    assert generate(generator_dir, tmp_path / "missing.txt", tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 2
    assert "prompts file not found" in capsys.readouterr().err


def test_empty_and_too_long_prompts_get_error_records_and_others_continue(generator_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ["List three fruits.", "", "sea " * 400, "Hi"]))
    with pytest.warns(UserWarning, match="prompt 1: empty prompt"):
        assert generate(generator_dir, prompts, tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 0
    records = read_records(tmp_path / "o.jsonl")
    assert [("error" in r) for r in records] == [False, True, True, False]
    assert "empty prompt" in records[1]["error"] and "context" in records[2]["error"]


def without_timing(line: bytes) -> dict:
    record = json.loads(line)
    del record["timing"]
    return record


def test_txt_prompts_and_resume_after_an_interrupted_run(generator_dir, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Write a poem about the sea.\n\nExplain gravity to a child.\nList three fruits.\n")
    out = tmp_path / "o.jsonl"
    args = ("--method", "sr", "--alpha", "0.5", "--batch-size", "8", "--decision-tokens", "4")
    assert generate(generator_dir, prompts, out, *args) == 0
    complete = out.read_bytes()
    lines = complete.splitlines(keepends=True)
    assert len(lines) == 3
    # a run killed while writing its third line: two complete lines and a torn one
    out.write_bytes(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    assert generate(generator_dir, prompts, out, *args) == 0
    resumed = out.read_bytes().splitlines(keepends=True)
    assert resumed[:2] == lines[:2]  # prompts 0 and 1 skipped
    assert without_timing(resumed[2]) == without_timing(lines[2])  # prompt 2 redone identically (same seed)
    # rerunning a finished file does nothing
    assert generate(generator_dir, prompts, out, *args) == 0
    assert out.read_bytes().splitlines(keepends=True) == resumed
    # a rerun with other settings refuses to mix results
    assert generate(generator_dir, prompts, out, "--method", "sr", "--alpha", "0.7", "--batch-size", "8") == 2


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = capsys.readouterr().out
    for option in ("--model", "--reward", "--method", "--n", "--batch-size", "--alpha", "--memory-budget",
                   "--max-new-tokens", "--temperature", "--top-p", "--top-k", "--seed", "--trust-remote-code",
                   "--prompts", "--out", "--dtype"):
        assert option in text
