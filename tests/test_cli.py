"""`specrej generate` end to end on the tiny models: records, bad input, failures, resume, locking;
`specrej summary`."""

import json
import os
import subprocess
import sys

import pytest

from specrej.cli.main import main
from specrej.errors import SpecrejError
from specrej.records.io import output_lock, read_records


def fails_on_gravity(prompt, responses):
    """A Python reward (`python:test_cli:fails_on_gravity`) with a bug that one prompt hits."""
    if "gravity" in prompt:
        raise ValueError("no physics here")
    return [float(len(r)) for r in responses]


def interrupted(prompt, responses):
    raise KeyboardInterrupt


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
        assert set(r["timing"]) == {"total_s", "generate_s", "score_s", "compute_s", "compute_clock", "threads"}
        assert r["timing"]["compute_clock"] == "process_cpu" and r["tokens"]["generated"] > 0
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


def test_adaptive_rejection_from_a_prefix_fit_and_online(generator_dir, prompts_file, tmp_path):
    full = tmp_path / "full.jsonl"
    assert generate(generator_dir, prompts_file, full, "--method", "bon", "--n", "12") == 0
    prefixes = tmp_path / "prefixes.parquet"
    assert main(["score-prefixes", "--trajectories", str(full), "--reward", "logprob", "--decision-tokens", "4,8",
                 "--out", str(prefixes), "--no-progress"]) == 0
    fitted, online = tmp_path / "fitted.jsonl", tmp_path / "online.jsonl"
    sr = ["--method", "sr-adaptive", "--alpha", "0.5", "--batch-size", "16", "--decision-tokens", "4,8",
          "--delta", "0.1"]
    assert generate(generator_dir, prompts_file, fitted, *sr, "--fit", str(prefixes)) == 0
    assert generate(generator_dir, prompts_file, online, *sr) == 0
    for record in read_records(fitted):
        assert record["params"]["rejection"]["fit"] == "study"
        assert {r["rule"]["source"] for r in record["rounds"]} <= {"fit", "interpolated"}
        for r in record["rounds"]:  # the record says why, in the rule's own part
            assert set(r) == {"decision_token", "batch_before", "batch_after", "ranked", "rule"}
            assert r["rule"]["delta"] == 0.1 and r["rule"]["accepted"] >= r["batch_after"]
    for record in read_records(online):  # no fit: the first round falls back to alpha, later ones estimate
        assert record["params"]["rejection"]["fit"] == "online"
        assert record["rounds"][0]["rule"]["source"] == "fixed_alpha_fallback"


@pytest.mark.parametrize("args, message", [
    (["--method", "sr-adaptive", "--alpha", "0.5", "--delta", "0.7"], "delta"),
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


def test_prompt_format_chat_wraps_the_plain_tokens_in_the_template(generator_dir):
    """The tiny tokenizer's specials are <unk> <s> </s> <|user|> <|assistant|> = ids 0-4 and it adds
    no BOS of its own; its template renders a user turn as <|user|>TEXT</s><|assistant|>."""
    from specrej import load_engine

    prompt = "Write a poem about the sea."
    plain, chat, auto = (load_engine(str(generator_dir), dtype="float32", prompt_format=f)
                         for f in ("plain", "chat", "auto"))
    words = plain.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert plain.encode_prompt(prompt) == words and 0 not in words and words
    assert chat.encode_prompt(prompt) == [3, *words, 2, 4]
    assert auto.encode_prompt(prompt) == chat.encode_prompt(prompt)  # the tokenizer has a template
    assert [e.used_prompt_format() for e in (plain, chat, auto)] == ["plain", "chat", "chat"]


def test_prompt_format_auto_is_plain_without_a_chat_template_and_chat_is_refused(engine, monkeypatch):
    monkeypatch.setattr(engine.tokenizer, "chat_template", None)
    assert engine.used_prompt_format() == "plain"  # auto, the engine fixture's
    assert engine.encode_prompt("List three fruits.") == engine.tokenizer("List three fruits.")["input_ids"]
    monkeypatch.setattr(engine, "prompt_format", "chat")
    with pytest.raises(SpecrejError, match="no chat template"):
        engine.encode_prompt("List three fruits.")


def test_prompt_format_is_recorded_and_a_resume_with_another_is_refused(generator_dir, prompts_file, tmp_path,
                                                                        capsys):
    runs = {}
    for prompt_format in ("plain", "chat", "auto"):
        out = tmp_path / f"{prompt_format}.jsonl"
        assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2",
                        "--prompt-format", prompt_format) == 0
        runs[prompt_format] = read_records(out)
    assert {r["params"]["prompt_format"] for r in runs["plain"]} == {"plain"}
    assert {r["params"]["prompt_format"] for r in runs["chat"]} == {"chat"}
    assert {r["params"]["prompt_format"] for r in runs["auto"]} == {"chat"}  # the tiny tokenizer has a template
    # "auto" is left out of the settings, so files written before --prompt-format existed still resume
    assert "prompt_format" not in runs["auto"][0]["params"]["output_settings"]
    assert runs["plain"][0]["params"]["output_settings"]["prompt_format"] == "plain"
    # the three prefills differ by the template's 3 tokens: plain's FLOPs are the smallest
    assert runs["plain"][0]["flops"]["prefill"] < runs["chat"][0]["flops"]["prefill"] == \
        runs["auto"][0]["flops"]["prefill"]
    capsys.readouterr()
    assert generate(generator_dir, prompts_file, tmp_path / "plain.jsonl", "--method", "bon", "--n", "2",
                    "--prompt-format", "chat") == 2
    assert "(prompt_format: 'plain' there, 'chat' now)" in capsys.readouterr().err


def test_prompt_format_must_be_one_of_the_three(generator_dir, prompts_file, tmp_path, capsys):
    assert generate(generator_dir, prompts_file, tmp_path / "o.jsonl", "--method", "bon", "--n", "2",
                    "--prompt-format", "template") == 2
    assert "--prompt-format: invalid choice: 'template'" in capsys.readouterr().err


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


def test_empty_and_too_long_prompts_get_error_records_and_others_continue(generator_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ["List three fruits.", "", "sea " * 400, "Hi"]))
    assert generate(generator_dir, prompts, tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 1
    records = read_records(tmp_path / "o.jsonl")
    assert [("error" in r) for r in records] == [False, True, True, False]
    assert "empty prompt" in records[1]["error"] and "context" in records[2]["error"]
    err = capsys.readouterr().err
    assert "specrej: prompt 1 failed: empty prompt\n" in err and "specrej: prompt 2 failed: " in err
    assert (f"2 of 4 prompts failed (1, 2); the first, prompt 1: empty prompt (error records in "
            f"{tmp_path / 'o.jsonl'}; rerun with --retry-failed") in err


@pytest.mark.parametrize("method", [["--method", "bon", "--n", "3"], ["--method", "sr", "--alpha", "0.5"]])
def test_a_python_reward_that_raises_fails_only_its_prompt(generator_dir, prompts_file, tmp_path, capsys, method):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, *method, "--batch-size", "4",
                    "--reward", "python:test_cli:fails_on_gravity") == 1
    records = read_records(out)
    assert [("error" in r) for r in records] == [False, True, False]
    assert records[1]["error"] == "reward python:test_cli:fails_on_gravity failed: ValueError: no physics here"
    assert records[1]["prompt"] == "Explain gravity to a child."
    assert "1 of 3 prompts failed" in capsys.readouterr().err


def test_ctrl_c_in_a_reward_still_stops_the_run(generator_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2",
                    "--reward", "python:test_cli:interrupted") == 130  # not an error record for prompt 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"specrej: interrupted after 0 of 3 prompts; {out} holds the finished ones; rerun the same command to resume")
    assert read_records(out) == [] and not (tmp_path / "o.jsonl.lock").exists()


def test_a_reward_model_failing_on_one_input_fails_only_its_prompt(generator_dir, reward_model_dir, prompts_file,
                                                                    tmp_path, monkeypatch):
    from transformers import AutoTokenizer, LlamaForSequenceClassification

    tokenizer, forward = AutoTokenizer.from_pretrained(reward_model_dir), LlamaForSequenceClassification.forward

    def forward_failing_on_gravity(self, input_ids=None, **kwargs):  # as a real model failing on one input would
        if any("gravity" in text for text in tokenizer.batch_decode(input_ids)):
            raise RuntimeError("CUDA error: device-side assert triggered")
        return forward(self, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(LlamaForSequenceClassification, "forward", forward_failing_on_gravity)
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2",
                    "--reward", str(reward_model_dir)) == 1
    records = read_records(out)
    assert [("error" in r) for r in records] == [False, True, False]
    assert records[1]["error"] == (f"reward {reward_model_dir} failed: RuntimeError: "
                                   "CUDA error: device-side assert triggered")


def test_when_every_prompt_fails_the_run_says_so_and_exits_1(generator_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2", "--memory-budget", "1KiB") == 1
    err = capsys.readouterr().err
    assert err.count("specrej: prompt ") == 3 and "specrej: prompt 0 failed: the memory budget of 1.0 KiB" in err
    assert "specrej: 3 of 3 prompts failed (0, 1, 2); the first, prompt 0: the memory budget of 1.0 KiB" in err
    assert "Traceback" not in err and len(read_records(out)) == 3
    # resuming finds nothing to do and reports the same; --exit-zero makes it a success
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2", "--memory-budget", "1KiB") == 1
    assert "3 of 3 prompts failed" in capsys.readouterr().err
    assert generate(generator_dir, prompts_file, out, "--method", "bon", "--n", "2", "--memory-budget", "1KiB",
                    "--exit-zero") == 0


def test_a_prompt_file_without_prompts_is_refused(generator_dir, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n  \n")
    assert generate(generator_dir, prompts, tmp_path / "o.jsonl", "--method", "bon", "--n", "2") == 2
    assert f"no prompts in {prompts}" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def cli_process(generator_dir, prompts, out) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specrej.cli.main", "generate", "--model", str(generator_dir), "--prompts", str(prompts),
         "--out", str(out), "--method", "bon", "--n", "4", "--max-new-tokens", "16", "--memory-budget", "64MiB",
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_process_on_the_same_out_is_refused_at_once(generator_dir, prompts_file, tmp_path):
    out = tmp_path / "o.jsonl"
    with output_lock(out):  # this test process plays the first run
        child = cli_process(generator_dir, prompts_file, out)
        _, err = child.communicate(timeout=120)
    assert child.returncode == 2, err
    assert err.strip() == (f"specrej: error: another specrej process is writing {out} (pid {os.getpid()}); "
                           "wait for it or choose another --out")
    assert not out.exists() and not (tmp_path / "o.jsonl.lock").exists()


def test_two_processes_started_together_write_each_prompt_once(generator_dir, prompts_file, tmp_path):
    out = tmp_path / "o.jsonl"
    children = [cli_process(generator_dir, prompts_file, out) for _ in range(2)]
    errs = [child.communicate(timeout=300)[1] for child in children]
    codes = sorted(child.returncode for child in children)
    # one refused while the other ran, or (if one started late) it found every prompt done
    assert codes in ([0, 2], [0, 0]), errs
    assert [r["prompt_id"] for r in read_records(out)] == [0, 1, 2]
    assert all("another specrej process is writing" in err for child, err in zip(children, errs)
               if child.returncode == 2)


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


def test_summary_shows_each_prompt_and_its_chosen_response(generator_dir, tmp_path, capsys):
    prompts, out = tmp_path / "p.json", tmp_path / "o.jsonl"
    long_prompt = "Write a poem about the sea.\n" * 6
    prompts.write_text(json.dumps([long_prompt, "", "List three fruits."]))
    assert generate(generator_dir, prompts, out, "--method", "bon", "--n", "3") == 1
    records = read_records(out)
    capsys.readouterr()

    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"== {out}: 3 prompts, 1 failed" in text
    assert "  prompt: " + " ".join(long_prompt.split())[:67] + "...\n" in text  # on one line, shortened
    assert "[1] ERROR empty prompt\n  prompt: \n" in text and "  prompt: List three fruits.\n" in text
    for r in (records[0], records[2]):
        assert f"[{r['prompt_id']}] score {r['best']['score']:.4g} | 3 candidates" in text
        assert f"  response ({r['best']['num_tokens']} tokens):\n    " in text
        assert "    " + r["best"]["text"].strip().replace("\n", "\n    ") in text  # in full

    assert main(["summary", str(out), "--max-chars", "5"]) == 0
    text = capsys.readouterr().out
    best = records[2]["best"]["text"].strip()
    assert f"    {best[:5]}... [{len(best) - 5} more characters]\n" in text
    assert main(["summary", str(out), "--max-chars", "0"]) == 2


def test_summary_of_a_file_holding_only_error_records(tmp_path, capsys):
    run = tmp_path / "errors.jsonl"
    records = [{"prompt_id": 0, "prompt": "Hi", "method": "bon", "params": {}, "error": "empty prompt"},
               {"prompt_id": 1, "method": "bon", "params": {}, "error": "reward r failed: ValueError: x"}]  # no prompt
    run.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["summary", str(run)]) == 0
    text = capsys.readouterr().out
    assert text == (f"== {run}: 2 prompts, 2 failed\n\n[0] ERROR empty prompt\n  prompt: Hi\n\n"
                    "[1] ERROR reward r failed: ValueError: x\n  prompt: \n\n")


def test_summary_of_a_file_that_is_no_run_says_so_in_one_line(tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt_id": 0, "prompt": "Hi", "answer": "x"}) + "\n")
    assert main(["summary", str(other)]) == 2
    assert capsys.readouterr().err == (f"specrej: error: {other} is not a run file of specrej generate "
                                       "(a record lacks best)\n")
