"""One way through a run (issue 38, item 3): `specrej generate` checks every setting once, opens
its output once before any model loads (the lock, a torn tail, the finished records, the resume
check), and then only loops; one function builds a record's params. Each check is counted over
real runs of the CLI and of `run_prompts` with the tiny random generator."""

import functools
import importlib
import json

import pytest

import specrej.api
from specrej.cli.main import main
from specrej.engine.sampling import SamplingParams
from specrej.errors import SpecrejError
from specrej.methods import Method
from specrej.records.io import RecordWriter, output_lock, read_records
from specrej.records.prompts import PromptItem

# what each step of a run is, by the function that does it (module.attribute)
STEPS = {
    "plan_run": "specrej.plan.plan_run",
    "check_run": "specrej.plan.check_run",
    "output_settings": "specrej.plan.output_settings",
    "read_prompts": "specrej.records.prompts.read_prompts",
    "output_lock": "specrej.records.io.output_lock",
    "read_run_file": "specrej.records.io._complete_records",
    "check_resume": "specrej.records.io.check_resume",
    "compare_settings": "specrej.records.io._refuse_changed",
    "read_records": "specrej.records.io.read_records",
    "load_engine": "specrej.engine.load.load_engine",
    "load_reward": "specrej.rewards.reward.load_reward",
    "run_planned": "specrej.api.run_planned",
    "prompt_record": "specrej.api.prompt_record",
    "record_params": "specrej.methods.session.record_params",
}


@pytest.fixture
def trace(monkeypatch):
    """Every call of a STEPS function, in order: (step, args, kwargs). `Method.check` (the
    parameters' check) and `RecordWriter` (the output opened) are traced too."""
    calls = []

    def traced(step, original):
        @functools.wraps(original)
        def call(*args, **kwargs):
            calls.append((step, args, kwargs))
            return original(*args, **kwargs)

        return call

    for step, target in STEPS.items():
        module_name, attribute = target.rsplit(".", 1)
        module = importlib.import_module(module_name)
        original = getattr(module, attribute)
        wrapped = traced(step, original)
        monkeypatch.setattr(module, attribute, wrapped)
        if getattr(specrej.api, attribute, None) is original:  # the Python API imported it by name
            monkeypatch.setattr(specrej.api, attribute, wrapped)
    monkeypatch.setattr(Method, "check", traced("method_check", Method.check))
    monkeypatch.setattr(RecordWriter, "__init__", traced("open_output", RecordWriter.__init__))
    return calls


def steps(calls) -> list[str]:
    return [step for step, _, _ in calls]


def count(calls, step: str) -> int:
    return steps(calls).count(step)


def generate(generator_dir, prompts, out, *extra) -> int:
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--method", "bon", "--n", "2", "--max-new-tokens", "6", "--memory-budget", "64MiB", "--no-progress",
                 *extra])


def write_prompts(path, prompts: list[str]):
    path.write_text(json.dumps(prompts))
    return path


def test_specrej_generate_goes_one_way_and_checks_each_thing_once(generator_dir, prompts_file, tmp_path, trace):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out) == 0
    # each step of `specrej generate` in order, as cli/main.py's `generate` names them, the output opened
    # (lock, its records read, resume check) before any model loads; then the loop, a record per prompt
    outline = [step for step in steps(trace) if step not in ("record_params", "prompt_record", "method_check")]
    assert outline == ["plan_run", "check_run", "output_settings", "read_prompts", "open_output", "output_lock",
                       "read_run_file", "check_resume", "load_engine", "load_reward", "run_planned"]
    assert count(trace, "method_check") == 1
    # each module is entered for its step and left: read in order, no module comes back
    module_of = {step: target.rsplit(".", 1)[0] for step, target in STEPS.items()} | {
        "open_output": RecordWriter.__module__}
    visits = [module_of[step] for i, step in enumerate(outline) if i == 0 or module_of[step] != module_of[outline[i - 1]]]
    assert visits == ["specrej.plan", "specrej.records.prompts", "specrej.records.io", "specrej.engine.load",
                      "specrej.rewards.reward", "specrej.api"]
    assert count(trace, "prompt_record") == 3 and count(trace, "record_params") == 3  # one per prompt
    assert count(trace, "read_records") == 0  # the output is read once, by its writer
    assert [r["prompt_id"] for r in read_records(out)] == [0, 1, 2]


def test_a_resume_reads_and_compares_each_setting_once(generator_dir, prompts_file, tmp_path, trace):
    out = tmp_path / "o.jsonl"
    half = write_prompts(tmp_path / "half.json", ["Write a poem about the sea.", "Explain gravity to a child."])
    assert generate(generator_dir, half, out) == 0
    trace.clear()
    assert generate(generator_dir, prompts_file, out) == 0
    for step in ("plan_run", "check_run", "method_check", "output_settings", "open_output", "output_lock",
                 "read_run_file", "check_resume", "load_engine", "load_reward", "run_planned"):
        assert count(trace, step) == 1, step
    assert count(trace, "prompt_record") == 1  # only the prompt left runs
    # every output setting compared with the file's once: all but the engine's before the models load,
    # its dtype, device and whether the step is compiled after (an eager run's records name no `compiled`)
    compared = [key for step, args, _ in trace if step == "compare_settings" for key in args[3]]
    settings = read_records(out)[0]["params"]["output_settings"]
    assert "compiled" not in settings
    assert sorted(compared) == sorted([*settings, "compiled"]) and compared[-3:] == ["dtype", "device", "compiled"]
    records = read_records(out)
    assert [r["prompt_id"] for r in records] == [0, 1, 2] and records[2]["params"]["output_settings"] == settings


def test_a_resume_with_other_settings_is_refused_before_any_model_loads(generator_dir, prompts_file, tmp_path,
                                                                        trace, capsys):
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts_file, out) == 0
    before = out.read_bytes()
    trace.clear()
    capsys.readouterr()
    assert generate(generator_dir, prompts_file, out, "--seed", "1") == 2
    assert capsys.readouterr().err == (f"specrej: error: {out} holds results made with other settings (seed: 0 there, "
                                       "1 now); use another --out or delete it\n")
    assert count(trace, "load_engine") == 0 and count(trace, "check_resume") == 1
    assert out.read_bytes() == before and not (tmp_path / "o.jsonl.lock").exists()


def test_a_resume_on_another_dtype_is_refused_once_loaded_and_keeps_the_error_records(generator_dir, tmp_path, capsys):
    """The engine's dtype is known once it is loaded: compared then, and --retry-failed drops the error
    records only after every setting agreed."""
    prompts = write_prompts(tmp_path / "p.json", ["List three fruits.", ""])
    out = tmp_path / "o.jsonl"
    assert generate(generator_dir, prompts, out) == 1
    before = out.read_bytes()
    capsys.readouterr()
    assert generate(generator_dir, prompts, out, "--dtype", "bfloat16", "--retry-failed") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"specrej: error: {out} holds results made with other settings (dtype: 'float32' there, 'bfloat16' now); "
        "use another --out or delete it")  # after transformers' loading bar
    assert out.read_bytes() == before and not (tmp_path / "o.jsonl.lock").exists()
    assert generate(generator_dir, prompts, out, "--retry-failed") == 1  # the same settings: the error runs again
    assert [r["prompt_id"] for r in read_records(out)] == [0, 1] and "error" in read_records(out)[1]


def test_run_prompts_checks_its_own_arguments_once(engine, tmp_path, trace):
    from specrej.api import run_prompts
    from specrej.rewards.reward import LogProbReward

    out = tmp_path / "o.jsonl"
    items = [PromptItem("a", "Hi"), PromptItem("b", "")]
    run = dict(engine=engine, reward=LogProbReward(), method="bon", n=2, model_name="m", reward_name="logprob",
               sampling=SamplingParams(max_new_tokens=4), progress=False, on_failure=lambda item, error: None)
    writer = run_prompts(items[:1], out, **run)
    assert writer.errors == {}
    trace.clear()
    writer = run_prompts(items, out, **run)  # resumed: only "b" runs, and fails
    for step in ("plan_run", "check_run", "method_check", "output_settings", "open_output", "output_lock",
                 "read_run_file", "check_resume", "run_planned", "prompt_record"):
        assert count(trace, step) == 1, step
    assert count(trace, "record_params") == 1 and count(trace, "read_records") == 0
    assert writer.errors == {"b": "empty prompt"}
    failed = read_records(out)[1]
    assert list(failed) == ["prompt_id", "prompt", "method", "params", "error", "reference_digest"]
    assert failed["reference_digest"] is None  # no reference answer: what a resume compares
    assert failed["params"]["prompt_seed"] and failed["params"]["output_settings"]["dtype"] == "float32"


def test_a_record_holds_the_method_session_and_run_params_in_that_order(engine, tmp_path):
    from specrej.api import run_prompts
    from specrej.rewards.reward import LogProbReward

    out = tmp_path / "o.jsonl"
    run_prompts([PromptItem(0, "Hi")], out, engine=engine, reward=LogProbReward(), method="bon", n=2, seed=7,
                model_name="m", reward_name="logprob", sampling=SamplingParams(max_new_tokens=4), progress=False)
    params = read_records(out)[0]["params"]
    keys = list(params)
    # the method's (n, batch_size), the session's (memory_budget, seed, sampling, forward), then the run's
    assert keys[:2] == ["n", "batch_size"] and keys.index("memory_budget") < keys.index("forward") < keys.index("model")
    assert keys[-4:] == ["display", "output_settings", "settings_digest", "prompt_seed"]
    assert params["seed"] == 7  # the run's seed, where the session's (the prompt's) stood
    assert params["prompt_seed"] != 7


def test_the_output_lock_is_taken_once_per_run(tmp_path):
    """No re-entrant lock: a second hold of one output in one process is refused, as another
    process's is."""
    out = tmp_path / "o.jsonl"
    with RecordWriter(out, {}):
        with pytest.raises(SpecrejError, match="is writing"):
            RecordWriter(out, {})
        with pytest.raises(SpecrejError, match="is writing"):
            with output_lock(out):
                pass
    assert not (tmp_path / "o.jsonl.lock").exists()
    with output_lock(out):
        pass
