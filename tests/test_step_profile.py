"""The step profile a record carries (`records.step_profile`), and eq. 7's compute modelled from it."""

from __future__ import annotations

import json

import pytest

from specrej.cli.main import main
from specrej.engine import decoding
from specrej.records import flops
from specrej.records.io import read_records
from specrej.records.shards import merge_shards
from specrej.records.step_profile import (add_step, modelled_seconds, profile, roofline_calibration, split_variant,
                                          step_counts, step_variant)


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--max-new-tokens", "16", "--memory-budget", "64MiB", "--no-progress", *extra])


@pytest.mark.parametrize("method", [
    ["--method", "bon", "--n", "6", "--batch-size", "4"],
    ["--method", "sr", "--alpha", "0.5", "--param", "max_init_batch=16", "--param", "min_tokens=2",
     "--memory-budget", "40KiB"],
    ["--method", "consensus", "--n", "8", "--param", "wave=2"],
    ["--method", "st-bon", "--n", "8"],
], ids=["bon", "sr", "consensus", "st-bon"])
def test_the_recorded_steps_are_the_engines_own_and_add_up_to_its_flops(generator_dir, prompts_file, tmp_path,
                                                                        monkeypatch, method):
    steps_run = []
    real_step = decoding.Rollout.step

    def counted_step(self):  # the engine's own count of its steps, beside the profile it records
        steps_run.append(self.num_rows)
        return real_step(self)

    monkeypatch.setattr(decoding.Rollout, "step", counted_step)
    out = tmp_path / "run.jsonl"
    assert generate(generator_dir, prompts_file, out, *method) == 0
    records = read_records(out)
    shape = flops.ModelShape.from_config(json.loads((generator_dir / "config.json").read_text()))
    total_steps = 0
    for record in records:
        steps = record["steps"]
        counts = step_counts(steps)
        total_steps += counts["steps"]
        assert counts["tokens_sampled"] == record["tokens"]["generated"]
        # the FLOPs the session counted as the work happened, from the profile alone
        assert flops.decode_flops(shape, counts["tokens_sampled"], counts["tokens_fed"],
                                  counts["positions_attended"]) == record["flops"]["generate"]
        assert len(steps["prefill"]) == 1
        assert flops.prefill_flops(shape, steps["prefill"][0], logits_positions=0) == record["flops"]["prefill"]
        assert sum(length * n for length, n in steps["scored"]) == record["tokens"]["scored"]
        assert all(fed <= sampled for sampled, fed, *_ in steps["decode"])
    assert total_steps == len(steps_run)
    assert sum(steps_run) == sum(r["tokens"]["generated"] for r in records)
    if "sr" in method:  # rejections happened: the rows fed shrink within a batch
        assert any(r["rounds"] and r["rounds"][0]["batch_after"] < r["rounds"][0]["batch_before"] for r in records)
        assert any(len({fed for _, fed, *_ in r["steps"]["decode"]}) > 2 for r in records)
    if "st-bon" in method:  # its early steps keep every layer's states, its later ones do not
        variants = {run[4] for r in records for run in r["steps"]["decode"]}
        assert variants == {"plain+layer-states", "plain"}


def test_steps_merge_into_runs_of_consecutive_contexts():
    runs = []
    for context in (10, 11, 12):
        add_step(runs, 4, 4, context, "plain")
    add_step(runs, 4, 3, 13, "plain")  # a row finished: a new run
    add_step(runs, 3, 3, 14, "plain")
    add_step(runs, 3, 3, 16, "plain")  # not the next context: a new run
    add_step(runs, 3, 3, 17, "plain+layer-states")
    assert runs == [[4, 4, 10, 3, "plain"], [4, 3, 13, 1, "plain"], [3, 3, 14, 1, "plain"], [3, 3, 16, 1, "plain"],
                    [3, 3, 17, 1, "plain+layer-states"]]
    # 4*3 + 4 + 3 + 3 + 3 sampled; fed 12 + 3 + 3 + 3 + 3; attended 4*(10+11+12) + 3*13 + 3*14 + 3*16 + 3*17
    assert step_counts({"decode": runs}) == {"steps": 7, "tokens_sampled": 25, "tokens_fed": 24,
                                             "positions_attended": 132 + 39 + 42 + 48 + 51}


def test_variants_name_the_sampler_and_what_else_a_step_computes():
    assert step_variant(1.0, 0, 1.0) == "plain"
    assert step_variant(0.7, 0, 1.0) == "tempered"
    assert step_variant(1.0, 50, 1.0) == "filtered"
    assert step_variant(0.0, 0, 1.0) == "filtered"  # greedy
    assert step_variant(1.0, 0, 1.0, certainty=True, layer_states=True) == "plain+certainty+layer-states"
    assert split_variant("plain+certainty+layer-states") == ("plain+certainty", "layer-states")
    assert split_variant("tempered+top-logprobs") == ("tempered+top-logprobs", "plain")


CALIBRATION = {
    # forward seconds at 1 and 3 rows, contexts 10 and 20
    "forward": {"plain": {"rows": [1, 3], "contexts": [10, 20], "seconds": [[1.0, 2.0], [3.0, 5.0]]}},
    "sample": {"plain": {"rows": [1, 3], "seconds": [0.1, 0.2]}},
    "prefill": {"tokens": [10, 20], "seconds": [4.0, 6.0]},
    "score": {"tokens": [1, 3], "seconds": [0.01, 0.03]},
}


def test_a_three_step_record_costs_what_the_calibration_says_by_hand():
    steps = {"prefill": [15],
             # two steps of 2 rows at contexts 15 and 16, then one step of 2 rows sampled, none fed
             "decode": [[2, 2, 15, 2, "plain"], [2, 0, 17, 1, "plain"]],
             "scored": [[2, 2]]}
    # prefill at 15 tokens: halfway between 4 and 6 -> 5
    # sampling at 2 rows: 0.15, three steps -> 0.45
    # forward at 2 rows: halfway between rows 1 and 3, i.e. (2, 3.5) at contexts (10, 20);
    #   context 15 -> 2.75, context 16 -> 2 + 1.5 * 0.6 = 2.9; the last step feeds nothing -> 5.65
    # score: two responses of 2 tokens, 0.02 each -> 0.04
    cost = modelled_seconds(steps, CALIBRATION)
    assert cost["prefill"] == pytest.approx(5.0)
    assert cost["sample"] == pytest.approx(0.45)
    assert cost["forward"] == pytest.approx(5.65)
    assert cost["score"] == pytest.approx(0.04)
    assert cost["total"] == pytest.approx(5.0 + 0.45 + 5.65 + 0.04)


def test_costs_extend_linearly_beyond_the_measured_grid_and_name_a_missing_variant():
    # 5 rows at context 30: rows extend 1 -> 3 linearly (+1 and +1.5 per row): (5, 8) at (10, 20),
    # context 30 extends that to 11; sampling 0.3
    steps = {"prefill": [], "decode": [[5, 5, 30, 1, "plain"]], "scored": []}
    assert modelled_seconds(steps, CALIBRATION)["total"] == pytest.approx(11.0 + 0.3)
    with pytest.raises(KeyError, match="layer-states"):
        modelled_seconds({"prefill": [], "decode": [[1, 1, 10, 1, "plain+layer-states"]], "scored": []}, CALIBRATION)


def test_a_merged_best_of_n_record_keeps_every_shards_steps():
    shard = {"prompt_id": 0, "prompt": "p", "method": "bon", "params": {"n": 2, "seed": 1},
             "best": {"candidate_id": 0, "text": "a", "score": 1.0, "num_tokens": 1},
             "worst": {"candidate_id": 1, "score": 0.0},
             "candidates": [{"id": 0, "text": "a"}], "rounds": [],
             "timing": {"total_s": 1.0, "generate_s": 1.0, "score_s": 0.0}, "tokens": {"generated": 4, "scored": 2},
             "peak_kv_bytes": 1, "measured_peak_bytes": None, "memory_margin_bytes": 0, "retries": 0, "flops": None,
             "steps": profile([5], [[[2, 2, 6, 1, "plain"], [2, 0, 7, 1, "plain"]]], [1, 1])}
    merged = merge_shards([shard, {**shard, "params": {"n": 2, "seed": 2}}])
    assert merged["steps"]["prefill"] == [5, 5]
    assert merged["steps"]["decode"] == [[2, 2, 6, 1, "plain"], [2, 0, 7, 1, "plain"]] * 2
    assert merged["steps"]["scored"] == [[1, 4]]
    assert "steps" not in merge_shards([{k: v for k, v in shard.items() if k != "steps"}, shard])


def test_a_roofline_step_costs_its_weights_read_until_the_rows_make_it_compute_bound():
    # one layer of 100 x 100 projections (q, k, v, o at 4 heads of 25, MLP 3 x 100 x 200 = 60,000):
    # 100,000 weights, 200,000 bytes in bf16. At 1e6 B/s the weights take 0.2 s per step; at 1e9
    # FLOP/s one row's projections, 2e5 FLOPs, take 0.0002 s, so the step is memory-bound until
    # about 1,000 rows. The KV read (context 1: 2 x 4 heads x 25 values = 200 values, 400 bytes per row)
    # adds 0.0004 s per row.
    shape = flops.ModelShape(num_layers=1, hidden_size=100, intermediate_size=200, num_attention_heads=4,
                             num_kv_heads=4, head_dim=25, vocab_size=10)
    assert flops.non_embedding_params(shape) == 100_000
    calibration = roofline_calibration(1e9, 1e6, shape, rows=(1, 16, 10_000), contexts=(1,))
    seconds = dict(zip(calibration["forward"]["plain"]["rows"], (s[0] for s in calibration["forward"]["plain"]["seconds"])))
    assert seconds[1] == pytest.approx(0.2 + 0.0004)
    assert seconds[16] == pytest.approx(0.2 + 16 * 0.0004)
    # 10,000 rows: 2e9 FLOPs of projections plus attention (4 FLOPs x 100 per attended position):
    # 2.004 s of compute against 0.2 + 4 s of bytes: memory-bound still, by the KV
    assert seconds[10_000] == pytest.approx(max(2e9 * 1.002 / 1e9, 0.2 + 10_000 * 0.0004))
    assert calibration["estimate"] is True and "not a measurement" in calibration["condition"]


def test_a_calibration_point_is_timed_in_whole_runs_until_they_cover_its_least_seconds():
    from specrej.engine.calibration import _per_step

    # runs of 2 steps at 10, 30, 20 ms a step: 0.02 s, then 0.08 s, then 0.12 s >= 0.1 s: three runs
    runs = iter([0.01, 0.03, 0.02, 0.5])
    calls = []
    per_step = _per_step(lambda: calls.append(1) or next(runs), steps=2, min_seconds=0.1)
    assert len(calls) == 3 and per_step == pytest.approx(0.02)
    assert _per_step(lambda: 0.5, steps=2, min_seconds=0) == 0.5  # one run at the least


def test_specrej_calibrate_measures_every_variant_and_costs_a_run_of_its_engine(generator_dir, prompts_file, tmp_path,
                                                                               monkeypatch, capsys):
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "calibration.json"
    argv = ["calibrate", "--model", str(generator_dir), "--compile", "off", "--reward", "logprob", "--rows", "1,4,8",
            "--contexts", "16,48", "--steps", "2", "--min-seconds", "0", "--repeats", "2", "--out", str(out)]
    assert main(argv) == 0
    calibration = json.loads(out.read_text())
    assert calibration["run"]["threads"] == 1 and calibration["run"]["compiled"] is False
    assert calibration["cpu"] and calibration["condition"] == "alone" and calibration["repeats"] == 2
    assert set(calibration["forward"]) == {"plain", "layer-states"}
    assert {"plain", "tempered", "filtered", "plain+certainty", "plain+top-logprobs"} <= set(calibration["sample"])
    forward = calibration["forward"]["plain"]
    assert forward["rows"] == [1, 4, 8] and len(forward["seconds"]) == 3 and len(forward["seconds"][0]) == 2
    assert calibration["forward"]["layer-states"]["rows"] == [1, 8]
    assert all(s > 0 for row in forward["seconds"] for s in row)
    # kept beside the graphs: a second call with --if-missing measures nothing
    capsys.readouterr()
    assert main([*argv, "--if-missing"]) == 0
    assert "not measured again" in capsys.readouterr().out
    # a run of the same engine is costed from its own steps
    run = tmp_path / "run.jsonl"
    assert generate(generator_dir, prompts_file, run, "--method", "bon", "--n", "4", "--compile", "off") == 0
    for record in read_records(run):
        cost = modelled_seconds(record["steps"], calibration)
        assert cost["forward"] > 0 and cost["sample"] > 0 and cost["prefill"] > 0 and cost["score"] > 0
    # --out never replaces a file that is not a calibration
    other = tmp_path / "notes.json"
    other.write_text('{"x": 1}')
    assert main([*argv[:-1], str(other)]) == 2
    assert other.read_text() == '{"x": 1}'


def test_specrej_calibrate_measures_only_the_sampler_variants_asked_for(generator_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "calibration.json"
    argv = ["calibrate", "--model", str(generator_dir), "--compile", "off", "--rows", "1,4", "--contexts", "16",
            "--steps", "1", "--min-seconds", "0", "--repeats", "1", "--out", str(out), "--if-missing"]
    assert main([*argv, "--samplers", "plain,plain+top-logprobs"]) == 0
    calibration = json.loads(out.read_text())
    assert list(calibration["sample"]) == ["plain", "plain+top-logprobs"]
    assert calibration["run"]["grid"]["samplers"] == ["plain", "plain+top-logprobs"]
    # a step of a variant not measured is named when costed, not costed at another's price
    steps = {"prefill": [20], "decode": [[4, 4, 20, 3, "plain+certainty"]], "scored": []}
    with pytest.raises(KeyError, match="no sampler variant 'plain\\+certainty'"):
        modelled_seconds(steps, calibration)
    # the kept calibration is of other variants: asked for all, it measures again
    capsys.readouterr()
    assert main(argv) == 0
    assert "not measured again" not in capsys.readouterr().out
    assert len(json.loads(out.read_text())["sample"]) == 5
    assert main([*argv, "--samplers", "plain,greedy"]) == 2
    assert "--samplers: 'greedy'; the variants are plain, tempered, filtered" in capsys.readouterr().err


def test_specrej_calibrate_roofline_writes_an_estimate_for_the_models_shape(generator_dir, tmp_path):
    out = tmp_path / "h100.json"
    assert main(["calibrate", "--model", str(generator_dir), "--roofline", "989e12,3.35e12", "--out", str(out)]) == 0
    calibration = json.loads(out.read_text())
    assert calibration["estimate"] is True and calibration["kind"] == "roofline"
    shape = flops.ModelShape.from_config(json.loads((generator_dir / "config.json").read_text()))
    assert calibration["shape"] == shape.to_dict()
    assert main(["calibrate", "--model", str(generator_dir), "--roofline", "fast", "--out", str(out)]) == 2
