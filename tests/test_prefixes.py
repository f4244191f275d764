"""`specrej score-prefixes`: the prefix table of a run, on the tiny models."""

import json
import math

import pandas as pd
import pytest

from specrej.cli.main import main
from specrej.records.io import read_records
from specrej.rewards.prefixes import PREFIX_COLUMNS, generator_decoder, score_prefixes
from specrej.rewards.reward import LogProbReward, Response, load_reward

TAUS = [1, 4, 8, 32]  # max_new_tokens is 16, so tau = 32 is past the end of every response


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "16", "--memory-budget", "64MiB", "--no-progress", *extra])


def score(trajectories, out, *extra):
    return main(["score-prefixes", "--trajectories", str(trajectories), "--out", str(out), "--no-progress", *extra])


@pytest.fixture(scope="module")
def bon_run(generator_dir, tmp_path_factory):
    """A Best-of-4 run on three prompts, scored with logprob (every candidate complete)."""
    folder = tmp_path_factory.mktemp("bon-run")
    prompts = folder / "prompts.json"
    texts = ["Write a poem about the sea.", "Explain gravity to a child.", "List three fruits."]
    prompts.write_text(json.dumps([{"prompt": p} for p in texts]))
    out = folder / "bon.jsonl"
    assert generate(generator_dir, prompts, out, "--method", "bon", "--n", "4", "--reward", "logprob") == 0
    return out


def candidates(records):
    return {(str(r["prompt_id"]), c["id"]): c for r in records for c in r["candidates"]}


def test_logprob_prefixes_are_mean_logprobs_and_finals_are_reused(bon_run):
    records = read_records(bon_run)
    table = score_prefixes(records, LogProbReward(), TAUS)
    assert list(table.columns) == list(PREFIX_COLUMNS)
    assert len(table) == sum(len(r["candidates"]) for r in records) * len(TAUS)
    assert table["prompt_id"].map(type).eq(str).all() and set(table["prompt_id"]) == {"0", "1", "2"}
    by_id = candidates(records)
    lengths = {len(c["token_ids"]) for c in by_id.values()}
    assert any(n > 8 for n in lengths), "the run should have responses longer than some taus"
    for row in table.itertuples():
        c = by_id[(row.prompt_id, row.candidate_id)]
        n = len(c["token_ids"])
        assert row.num_tokens == n and row.final_score == c["final_score"]  # same reward: the record's score
        if row.tau < n:
            assert not row.finished_before_tau
            assert row.partial_score == math.fsum(c["token_logprobs"][: row.tau]) / row.tau
        else:
            assert row.finished_before_tau and row.partial_score == row.final_score
    assert table["finished_before_tau"].any() and not table["finished_before_tau"].all()


def test_text_reward_scores_the_decoded_token_prefix(bon_run, generator_dir):
    from transformers import AutoTokenizer

    records = read_records(bon_run)
    tokenizer = AutoTokenizer.from_pretrained(generator_dir)
    reward = load_reward("python:toy_rewards:length")
    table = score_prefixes(records, reward, TAUS, generator_decoder(str(generator_dir)))
    by_id = candidates(records)
    for row in table.itertuples():
        c = by_id[(row.prompt_id, row.candidate_id)]
        assert row.final_score == len(c["text"])  # the record's scores are logprob: rescored with this reward
        prefix = c["token_ids"][: row.tau]
        assert row.partial_score == len(tokenizer.decode(prefix, skip_special_tokens=True))
        if row.finished_before_tau:
            assert row.partial_score == row.final_score


def test_text_reward_needs_a_decoder(bon_run):
    from specrej.errors import SpecrejError

    with pytest.raises(SpecrejError, match="decoded with the generator's tokenizer"):
        score_prefixes(read_records(bon_run), load_reward("python:toy_rewards:length"), TAUS)


def test_cli_round_trip_with_a_reward_model(bon_run, generator_dir, reward_model_dir, tmp_path):
    out = tmp_path / "tables" / "prefix.parquet"
    # no --model: the generator comes from the records' params.model
    assert score(bon_run, out, "--reward", str(reward_model_dir), "--decision-tokens", "8,4,4,32",
                 "--reward-batch-size", "5") == 0
    assert [p.name for p in out.parent.iterdir()] == ["prefix.parquet"]  # no temporary file left behind
    table = pd.read_parquet(out)
    assert list(table.columns) == list(PREFIX_COLUMNS)
    assert pd.api.types.is_string_dtype(table["prompt_id"]) and table["finished_before_tau"].dtype == bool
    assert sorted(table["tau"].unique()) == [4, 8, 32]
    records = read_records(bon_run)
    assert len(table) == sum(len(r["candidates"]) for r in records) * 3
    assert table[["partial_score", "final_score"]].map(math.isfinite).all(axis=None)

    # each score is the reward model's score of that prefix, scored on its own
    reward = load_reward(str(reward_model_dir))
    tokenizer_decode = generator_decoder(str(generator_dir))
    record, c = next((r, c) for r in records for c in r["candidates"] if len(c["token_ids"]) > 8)
    rows = table[(table["prompt_id"] == str(record["prompt_id"])) & (table["candidate_id"] == c["id"])]
    rows = rows.set_index("tau")
    expected_final = reward.score(record["prompt"], [Response(c["text"])])[0]
    assert rows.loc[32, "final_score"] == pytest.approx(expected_final, abs=1e-4)
    assert rows.loc[32, "partial_score"] == rows.loc[32, "final_score"]
    for tau in (4, 8):
        text = tokenizer_decode([c["token_ids"][:tau]])[0]
        expected = reward.score(record["prompt"], [Response(text)])[0]
        assert rows.loc[tau, "partial_score"] == pytest.approx(expected, abs=1e-4)
        assert rows.loc[tau, "partial_score"] != pytest.approx(expected_final, abs=1e-6)

    from analysis.io import load_prefix_table

    assert len(load_prefix_table(out)) == len(table)


def test_halted_candidates_error_records_and_mixed_prompt_ids(generator_dir, prompts_file, tmp_path):
    run = tmp_path / "sr.jsonl"
    assert generate(generator_dir, prompts_file, run, "--method", "sr", "--alpha", "0.5", "--batch-size", "8",
                    "--decision-tokens", "4") == 0
    records = read_records(run)
    records[0]["prompt_id"] = "alpaca-7"  # ids of mixed types
    records.append({"prompt_id": 3, "prompt": "", "method": "sr", "params": {}, "error": "empty prompt"})
    run.write_text("".join(json.dumps(r) + "\n" for r in records))
    complete = sum(c["complete"] for r in records[:-1] for c in r["candidates"])
    assert complete < sum(len(r["candidates"]) for r in records[:-1])  # some were halted before completing

    out = tmp_path / "prefix.parquet"
    with pytest.warns(UserWarning, match="never completed"):
        assert score(run, out, "--reward", "logprob", "--decision-tokens", "2,8") == 0
    table = pd.read_parquet(out)
    assert len(table) == complete * 2
    assert set(table["prompt_id"]) == {"alpaca-7", "1", "2"}
    assert table["final_score"].notna().all()


def test_nan_scores_count_as_minus_inf(bon_run):
    with pytest.warns(UserWarning, match="NaN/inf"):
        table = score_prefixes(read_records(bon_run), load_reward("python:toy_rewards:broken"), TAUS,
                               lambda ids: ["x"] * len(ids))
    assert not table[["partial_score", "final_score"]].isna().any(axis=None)
    assert (table["partial_score"] == -math.inf).any() and (table["partial_score"] == 1.0).any()


@pytest.mark.parametrize("make, args, message", [
    (None, ["--reward", "logprob", "--decision-tokens", "8"], "trajectories file not found"),
    ("", ["--reward", "logprob", "--decision-tokens", "8"], "no complete records"),
    ("errors", ["--reward", "logprob", "--decision-tokens", "8"], "every record"),
    ("run", ["--reward", "nonsense:spec", "--decision-tokens", "8"], "unknown reward"),
    ("run", ["--reward", "logprob", "--decision-tokens", ","], "no decision tokens"),
    ("run", ["--reward", "logprob", "--decision-tokens", "0,8"], "positive integers"),
    ("run", ["--reward", "logprob", "--decision-tokens=-4"], "positive integers"),
    ("run", ["--reward", "python:toy_rewards:length", "--decision-tokens", "8", "--model",
             "/no/such/model"], "model path not found"),
])
def test_bad_input_exits_2_with_one_clear_message(bon_run, tmp_path, capsys, make, args, message):
    trajectories = tmp_path / "run.jsonl"
    if make == "run":
        trajectories = bon_run
    elif make == "errors":
        trajectories.write_text(json.dumps({"prompt_id": 0, "prompt": "", "method": "bon", "params": {},
                                            "error": "empty prompt"}) + "\n")
    elif make is not None:
        trajectories.write_text(make)
    out = tmp_path / "prefix.parquet"
    assert score(trajectories, out, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["score-prefixes", "--help"])
    text = capsys.readouterr().out
    for option in ("--trajectories", "--reward", "--decision-tokens", "--out", "--model", "--trust-remote-code",
                   "--dtype", "--device", "--reward-batch-size", "--no-progress"):
        assert option in text


def test_the_prefix_table_columns_have_one_definition():
    import specrej.records.io
    import specrej.rewards.prefixes

    correlation = pytest.importorskip("analysis.correlation")
    assert specrej.rewards.prefixes.PREFIX_COLUMNS is specrej.records.io.PREFIX_COLUMNS is correlation.PREFIX_COLUMNS
    assert tuple(specrej.records.io.PREFIX_DTYPES) == specrej.records.io.PREFIX_COLUMNS
