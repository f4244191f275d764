"""--trust-remote-code per model (the generator, the reward model) and --model-revision /
--reward-revision for hub ids: each refusal is one line with exit 2 and nothing written, and a
pinned revision is loaded, recorded and compared on resume.

The hub is a Hugging Face cache built on disk (HF_HUB_CACHE, offline), holding a repository's
`main` and an older commit, so a revision that does not reach every load fails the run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrej import Response, SpecrejError, load_engine, load_reward
from specrej.cli.main import main
from specrej.cli.parser import build_parser, trusts
from specrej.records.io import read_records

CUSTOM_LM_CODE = '''"""A generator whose code ships in its directory (auto_map): a Llama under its own model type."""
from transformers import LlamaConfig, LlamaForCausalLM


class CustomLMConfig(LlamaConfig):
    model_type = "custom_lm"


class CustomLM(LlamaForCausalLM):
    config_class = CustomLMConfig
'''


@pytest.fixture(scope="module")
def custom_code_generator_dir(tmp_path_factory, generator_dir) -> Path:
    """The tiny generator's weights and tokenizer under a model type of its own, whose code is in
    the directory: it loads only when trusted."""
    path = tmp_path_factory.mktemp("custom-code-generator")
    for name in os.listdir(generator_dir):
        shutil.copy(generator_dir / name, path / name)
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="custom_lm", architectures=["CustomLM"],
                  auto_map={"AutoConfig": "custom_lm_code.CustomLMConfig",
                            "AutoModelForCausalLM": "custom_lm_code.CustomLM"})
    (path / "config.json").write_text(json.dumps(config))
    (path / "custom_lm_code.py").write_text(CUSTOM_LM_CODE)
    return path


def generate(model, reward, prompts, out, *options) -> int:
    return main(["generate", "--model", str(model), "--reward", str(reward), "--method", "bon", "--n", "2",
                 "--max-new-tokens", "4", "--dtype", "float32", "--no-progress", "--prompts", str(prompts),
                 "--out", str(out), *options])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("specrej: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def nothing_written(out: Path) -> bool:
    return not out.exists() and not Path(f"{out}.lock").exists() and not Path(f"{out}.log").exists()


# -- --trust-remote-code, per model ----------------------------------------------------------------

@pytest.mark.parametrize("options, trusted", [
    ([], set()),
    (["--trust-remote-code"], {"model", "reward"}),  # bare: both, as before it took a value
    (["--trust-remote-code", "both"], {"model", "reward"}),
    (["--trust-remote-code", "reward"], {"reward"}),
    (["--trust-remote-code", "model"], {"model"}),
    (["--trust-remote-code", "model", "--trust-remote-code", "reward"], {"model", "reward"}),
])
def test_trust_remote_code_names_the_models_it_trusts(options, trusted):
    for command in (["generate", "--method", "bon", "--prompts", "p", "--out", "o"],
                    ["score-prefixes", "--trajectories", "t", "--reward", "r", "--decision-tokens", "8",
                     "--out", "o"]):
        args = build_parser().parse_args([*command, *options])
        assert {model for model in ("model", "reward") if trusts(args, model)} == trusted


def test_an_unknown_trust_value_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["generate", "--method", "bon", "--prompts", "p", "--out", "o",
                                   "--trust-remote-code", "generator"])
    assert exit.value.code == 2
    assert one_error_line(capsys).startswith("specrej: error: --trust-remote-code: invalid choice: 'generator'")


def test_trusting_the_reward_alone_leaves_the_generators_code_unrun(custom_code_generator_dir,
                                                                  custom_code_reward_dir, one_prompt, tmp_path,
                                                                  capsys):
    out = tmp_path / "run.jsonl"
    # the paper's ArmoRM case: the reward's code is trusted, so a generator with code of its own is refused
    assert generate(custom_code_generator_dir, custom_code_reward_dir, one_prompt, out,
                    "--trust-remote-code", "reward") == 2
    assert one_error_line(capsys) == (f"specrej: error: {custom_code_generator_dir} contains custom code; pass "
                                      "--trust-remote-code model to run it")
    assert nothing_written(out)
    # and trusting the generator alone leaves the reward model's code unrun
    assert generate(custom_code_generator_dir, custom_code_reward_dir, one_prompt, out,
                    "--trust-remote-code", "model") == 2
    assert "contains custom code; pass --trust-remote-code reward to run it" in one_error_line(capsys)
    assert nothing_written(out)


def test_the_trusted_reward_runs_its_own_code_beside_a_plain_generator(generator_dir, custom_code_reward_dir,
                                                                        one_prompt, tmp_path):
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, custom_code_reward_dir, one_prompt, out, "--trust-remote-code", "reward") == 0
    [record] = read_records(out)
    reward = load_reward(str(custom_code_reward_dir), trust_remote_code=True)
    assert type(reward.model).__name__ == "CustomRM"
    expected = reward.score(record["prompt"], [Response(c["text"]) for c in record["candidates"]])
    assert [c["final_score"] for c in record["candidates"]] == pytest.approx(expected, abs=1e-5)


def test_a_bare_trust_remote_code_runs_both_models_own_code(custom_code_generator_dir, custom_code_reward_dir,
                                                            one_prompt, tmp_path):
    out = tmp_path / "run.jsonl"
    assert generate(custom_code_generator_dir, custom_code_reward_dir, one_prompt, out, "--trust-remote-code") == 0
    [record] = read_records(out)
    assert "error" not in record and record["params"]["forward"] == "hf"  # custom_lm: through its own forward
    engine = load_engine(str(custom_code_generator_dir), dtype="float32", trust_remote_code=True)
    assert type(engine.model).__name__ == "CustomLM"


def test_score_prefixes_trusts_each_model_alone(generator_dir, custom_code_reward_dir, one_prompt, tmp_path, capsys):
    run, table = tmp_path / "run.jsonl", tmp_path / "prefixes.parquet"
    assert generate(generator_dir, "logprob", one_prompt, run) == 0
    score = ["score-prefixes", "--trajectories", str(run), "--reward", str(custom_code_reward_dir),
             "--decision-tokens", "2", "--out", str(table), "--dtype", "float32", "--no-progress"]
    assert main([*score, "--trust-remote-code", "model"]) == 2
    assert "contains custom code; pass --trust-remote-code reward to run it" in one_error_line(capsys)
    assert not table.exists()
    assert main([*score, "--trust-remote-code", "reward"]) == 0 and table.exists()


# -- --model-revision / --reward-revision: refused where there is no hub id ------------------------

@pytest.mark.parametrize("options, message", [
    (["--model-revision", "v1"], "--model-revision v1 pins a Hugging Face hub id, but {generator} is a local "
                                 "path: drop --model-revision"),
    (["--reward-revision", "v1"], "--reward-revision v1 pins a reward model's Hugging Face hub id, but logprob "
                                  "is no model: drop --reward-revision"),
    (["--model-revision", ""], "--model-revision must be a branch, tag or commit of the Hugging Face hub, "
                               "got ''"),
])
def test_a_revision_without_a_hub_id_is_one_line_and_writes_nothing(generator_dir, one_prompt, tmp_path, capsys,
                                                                    options, message):
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, "logprob", one_prompt, out, *options) == 2
    assert one_error_line(capsys) == "specrej: error: " + message.format(generator=generator_dir)
    assert nothing_written(out)


@pytest.mark.parametrize("model, kind", [("default", "a named model"), ("model.gguf", "a .gguf file")])
def test_a_revision_of_a_named_model_or_gguf_is_refused_before_any_fetch(model, kind, one_prompt, tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "empty-cache"))  # a fetch would fill it
    out = tmp_path / "run.jsonl"
    assert generate(model, "logprob", one_prompt, out, "--model-revision", "v1") == 2
    assert f"--model-revision v1 pins a Hugging Face hub id, but {model} is {kind}" in one_error_line(capsys)
    assert nothing_written(out) and not (tmp_path / "empty-cache").exists()


def test_the_api_refuses_a_revision_of_a_local_model(generator_dir, reward_model_dir):
    with pytest.raises(SpecrejError, match="--model-revision v1 pins a Hugging Face hub id"):
        load_engine(str(generator_dir), revision="v1")
    with pytest.raises(SpecrejError, match=r"^--reward-revision v1 pins a Hugging Face hub id, but .* is a local"):
        load_reward(str(reward_model_dir), revision="v1")


# -- a pinned revision is loaded, recorded and compared on resume ----------------------------------

def commit(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def hub_repo(cache: Path, repo_id: str, files_at: Path, pinned: str) -> None:
    """`repo_id` in a Hugging Face cache: commit `pinned` holds the files of `files_at`, while
    `main` has moved on to a commit holding none of them (a load that is not at `pinned` fails)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / pinned
    snapshot.mkdir(parents=True)
    for name in os.listdir(files_at):
        shutil.copy(files_at / name, snapshot / name)
    (repo / "snapshots" / commit("main") / "README.md").parent.mkdir(parents=True)
    (repo / "snapshots" / commit("main") / "README.md").write_text("moved on\n")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit("main"))


def test_pinned_revisions_load_and_are_recorded_and_a_resume_at_another_is_refused(
        generator_dir, custom_code_reward_dir, one_prompt, tmp_path, monkeypatch, capsys):
    hub = tmp_path / "hub"
    hub_repo(hub, "specrej-test/tiny", generator_dir, commit("generator v1"))
    hub_repo(hub, "specrej-test/custom-rm", custom_code_reward_dir, commit("reward v1"))  # ArmoRM-like
    out = tmp_path / "run.jsonl"
    pinned = ["--model-revision", commit("generator v1"), "--reward-revision", commit("reward v1")]
    command = [sys.executable, "-m", "specrej.cli.main", "generate", "--model", "specrej-test/tiny",
               "--reward", "specrej-test/custom-rm", "--trust-remote-code", "reward", "--method", "bon", "--n", "2",
               "--max-new-tokens", "4", "--dtype", "float32", "--no-progress", "--prompts", str(one_prompt),
               "--out", str(out)]
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "mod")}
    unpinned = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert unpinned.returncode == 2 and "cannot load model 'specrej-test/tiny'" in unpinned.stderr  # main: no files
    assert not out.exists()

    run = subprocess.run([*command, *pinned], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [record] = read_records(out)
    params = record["params"]
    assert (params["model_revision"], params["reward_revision"]) == (commit("generator v1"), commit("reward v1"))
    assert params["output_settings"]["model_revision"] == commit("generator v1")
    assert params["output_settings"]["reward_revision"] == commit("reward v1")

    # a resume at another revision, or at none, is refused before any model loads (no hub here)
    monkeypatch.chdir(tmp_path)
    before = out.read_bytes()
    resume = ["--trust-remote-code", "reward", "--reward-revision", commit("reward v1")]
    assert generate("specrej-test/tiny", "specrej-test/custom-rm", one_prompt, out, *resume,
                    "--model-revision", commit("generator v2")) == 2
    assert one_error_line(capsys) == (
        f"specrej: error: {out} holds results made with other settings (model_revision: "
        f"'{commit('generator v1')}' there, '{commit('generator v2')}' now); use another --out or delete it")
    assert generate("specrej-test/tiny", "specrej-test/custom-rm", one_prompt, out, *resume) == 2
    assert f"(model_revision: '{commit('generator v1')}' there, None now)" in one_error_line(capsys)
    assert out.read_bytes() == before

    # score-prefixes decodes with the records' generator at their revision (main holds no tokenizer)
    table = tmp_path / "prefixes.parquet"
    scored = subprocess.run([sys.executable, "-m", "specrej.cli.main", "score-prefixes", "--trajectories", str(out),
                             "--reward", "specrej-test/custom-rm", *resume, "--decision-tokens", "2",
                             "--out", str(table), "--dtype", "float32", "--no-progress"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert table.exists()


def test_a_run_without_a_revision_records_none(generator_dir, one_prompt, tmp_path):
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, "logprob", one_prompt, out) == 0
    [record] = read_records(out)
    assert not {"model_revision", "reward_revision"} & {*record["params"], *record["params"]["output_settings"]}
