"""The engine's own forward pass on Qwen3 (`llama.LlamaForward` with q/k norms) and Gemma 3 text
(`gemma3.Gemma3Forward`), in float32 and bfloat16, against transformers' own full forward pass
over the same tokens: logits after the prompt, after decoding past Gemma's sliding window, after
pruning rows; every layer's states against output_hidden_states; the memory bounds measured.

The tiny models are built here (not conftest's): Gemma 3 with a sliding window of 8 (shorter than
the prompt, and a short prompt that decoding carries past it), sliding and full layers mixed, a
linear rope scaling on the full layers, final logit soft-capping; every norm weight randomized, so
that Gemma's (1 + weight) and Qwen3's q/k norm weights are exercised.

Tolerances: float32, absolute 1e-4 on logits (the same model, a different order of operations);
bfloat16, see BF16_ATOL.
"""

import json
import logging
import os
import subprocess
import sys

import pytest
import torch
from conftest import GENERATOR_TEMPLATE, build_tokenizer

from specrej import SamplingParams, SpecrejError, load_engine
from specrej.engine import decoding
from specrej.engine.budget import PeakMemory
from specrej.engine.linear import packs

PROMPT = "Write a poem about the sea."
MODELS = ["qwen3", "gemma3_text"]
DTYPES = ["float32", "bfloat16"]
ATOL = 1e-4
# bfloat16: both passes round every op's output to 8 significant bits, in a different order (fused
# GEMMs, shared-prompt attention, one-token cached steps against one pass over the sequence); a bf16
# ulp of these logits (|logits| < 4) is at most 2**-6 = 0.0156. Measured after 15 steps: at most
# 0.0195 (qwen3), 0.031 (gemma3); float32 at most 2e-6. Tolerance: 0.05, about 3 ulps.
BF16_ATOL = 0.05
# every-layer states: bf16 residual streams of magnitude up to ~8 (Gemma's sqrt(hidden) scaled
# embedding), where an ulp is 2**-5; measured at most 0.031 (qwen3), 0.0625 (gemma3, 2 ulps)
BF16_STATES_ATOL, BF16_STATES_RTOL = 0.05, 0.016
SLIDING_WINDOW = 8


def _config(model_type: str, vocab_size: int):
    import transformers as tf

    common = {"vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "bos_token_id": 1,
              "eos_token_id": 2, "pad_token_id": 0}
    if model_type == "qwen3":
        return tf.Qwen3Config(num_hidden_layers=2, tie_word_embeddings=False, **common)
    return tf.Gemma3TextConfig(
        num_hidden_layers=3, sliding_window=SLIDING_WINDOW, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_scaling={"rope_type": "linear", "factor": 4.0},  # the full layers' rotary, as Gemma 3 4B+
        final_logit_softcapping=5.0, **common)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """model_dir(model_type) -> a saved tiny random causal LM (built once per module)."""
    from transformers import AutoModelForCausalLM

    built = {}

    def build(model_type: str):
        if model_type not in built:
            path = tmp_path_factory.mktemp(f"fast-{model_type}")
            tokenizer = build_tokenizer(GENERATOR_TEMPLATE)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(_config(model_type, len(tokenizer)))
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if "norm" in name:  # Gemma: around 0 (the norm is 1 + w); Qwen3: around 1
                        param.copy_(torch.randn_like(param) * 0.3 + (0 if model_type == "gemma3_text" else 1))
                model.get_output_embeddings().weight.mul_(4)  # sharper next-token distributions
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            built[model_type] = path
        return built[model_type]

    return build


def engine_for(model_dir, model_type, dtype):
    engine = load_engine(str(model_dir(model_type)), dtype=dtype)
    assert engine.forward_kind == "llama" and engine.dtype == getattr(torch, dtype)
    engine.stop_token_ids = torch.tensor([-1])  # no row finishes: the test controls the rows
    return engine


def reference_logits(model, prompt_ids, rows_tokens):
    """Logits at every position from a fresh HF forward over prompt + each row's tokens (no cache)."""
    with torch.no_grad():
        return model(torch.tensor([prompt_ids + row for row in rows_tokens])).logits.float()


def hf_states(model, ids):
    """transformers' own output_hidden_states of one sequence: [L + 1, positions, H]."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.stack([h[0] for h in out.hidden_states])


def live_tokens(rollout):
    return rollout.tokens[:, : rollout.length].tolist()


def max_error(engine, prompt_ids, rollout) -> float:
    ref = reference_logits(engine.model, prompt_ids, live_tokens(rollout))[:, -1]
    return (engine.forward.logits(rollout.hidden) - ref).abs().max().item()


def assert_matches_hf(engine, prompt_ids, rollout):
    """The rollout's next-token logits and every sampled token's log-prob equal HF's full forward."""
    atol = ATOL if engine.dtype == torch.float32 else BF16_ATOL
    tokens = live_tokens(rollout)
    ref = reference_logits(engine.model, prompt_ids, tokens)
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), ref[:, -1], atol=atol, rtol=0)
    if rollout.length:
        predicted = ref[:, len(prompt_ids) - 1 : -1].log_softmax(-1)  # position i predicts token i
        ref_logprobs = predicted.gather(-1, torch.tensor(tokens)[..., None])[..., 0]
        torch.testing.assert_close(rollout.logprobs[:, : rollout.length], ref_logprobs, atol=atol * 10, rtol=0)


def test_qwen3_and_gemma3_run_on_the_fast_path(model_dir, caplog):
    from specrej.engine.gemma3 import Gemma3Forward
    from specrej.engine.llama import LlamaForward

    with caplog.at_level(logging.WARNING, logger="specrej"):
        qwen3 = load_engine(str(model_dir("qwen3")))
        gemma = load_engine(str(model_dir("gemma3_text")))
    assert not [r for r in caplog.records if "fallback" in r.getMessage()]
    assert type(qwen3.forward) is LlamaForward and qwen3.forward.qk_norm
    assert type(gemma.forward) is Gemma3Forward and qwen3.forward_kind == gemma.forward_kind == "llama"
    assert gemma.forward.is_sliding == [True, False, True] and gemma.forward.sliding_window == SLIDING_WINDOW
    # Gemma: no refusal past the sliding window, only past the context
    gemma.check_fits(20, 200)
    with pytest.raises(SpecrejError, match="context of 256"):
        gemma.check_fits(20, 237)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", MODELS)
def test_decode_matches_transformers_past_the_window_and_after_pruning(model_dir, model_type, dtype):
    engine = engine_for(model_dir, model_type, dtype)
    prompt_ids = engine.encode_prompt(PROMPT)
    assert len(prompt_ids) > SLIDING_WINDOW  # the prefill's sliding layers slide already
    params = SamplingParams(max_new_tokens=24)
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), 6, 16, params, torch.Generator().manual_seed(0))
    assert_matches_hf(engine, prompt_ids, rollout)
    for _ in range(10):  # the window moves past the prompt's end: its prompt part is then empty
        rollout.step()
    assert_matches_hf(engine, prompt_ids, rollout)
    rollout.halt(rollout.candidate_ids[[0, 3, 4]].tolist())
    assert rollout.num_rows == rollout.cache.rows == 3
    assert_matches_hf(engine, prompt_ids, rollout)
    rollout.step()
    rollout.relayout(24)  # a re-layout of the compacted cache
    for _ in range(4):
        rollout.step()
    assert rollout.cache.max_len == 24 and rollout.length == 15
    assert_matches_hf(engine, prompt_ids, rollout)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_short_prompt_that_decoding_carries_past_the_window(model_dir, dtype):
    """Prompt of 3 tokens (the prefill sees no window): each decode step against HF, as the window's
    start moves from the prompt's first token into the generated ones."""
    engine = engine_for(model_dir, "gemma3_text", dtype)
    prompt_ids = [1, 40, 41]
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), 4, 14, SamplingParams(max_new_tokens=14),
                             torch.Generator().manual_seed(2))
    for _ in range(13):
        rollout.step()
        assert_matches_hf(engine, prompt_ids, rollout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", MODELS)
def test_layer_states_are_transformers_hidden_states(model_dir, model_type, dtype):
    engine = engine_for(model_dir, model_type, dtype)
    atol, rtol = (1e-4, 1e-4) if dtype == "float32" else (BF16_STATES_ATOL, BF16_STATES_RTOL)
    prompt_ids = engine.encode_prompt(PROMPT)
    params = SamplingParams(max_new_tokens=12)
    runs = []
    for collect in (False, True):
        prompt = decoding.prefill(engine.forward, prompt_ids, layer_states=collect)
        rollout = engine.rollout(prompt, 3, 12, params, torch.Generator().manual_seed(1))
        rollout.collect_layer_states = collect
        for _ in range(10):
            rollout.step()
        runs.append((prompt, rollout))
    (_, plain), (prompt, collected) = runs
    assert torch.equal(plain.tokens[:, :10], collected.tokens[:, :10]) and plain.layer_states is None
    assert collected.layer_states.shape == (len(engine.layers) + 1, 3, engine.config.hidden_size)
    for row in range(3):
        reference = hf_states(engine.model, prompt_ids + collected.tokens[row, :10].tolist())
        torch.testing.assert_close(prompt.layer_states, reference[:, len(prompt_ids) - 1], atol=atol, rtol=rtol)
        torch.testing.assert_close(collected.layer_states[:, row], reference[:, -1], atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", MODELS)
def test_the_memory_bounds_hold_measured(model_dir, model_type, dtype):
    """One decode step of `rows` rows allocates at most rows x decode_row_bytes(context), and the
    prefill at most prefill_bytes(P) beside the prompt KV it returns (budget.StorageTracker)."""
    engine = engine_for(model_dir, model_type, dtype)
    fwd, rows = engine.forward, 8
    prompt_ids = (engine.encode_prompt(PROMPT) * 4)[:40]
    with torch.inference_mode(), PeakMemory("cpu") as meter:  # as decoding.prefill runs it
        state, _ = fwd.forward_prompt(torch.tensor([prompt_ids]))
    assert meter.peak_bytes <= fwd.footprint.prefill_bytes(40) + 40 * fwd.footprint.kv_bytes_per_token
    cache = fwd.new_cache()
    cache.share_prompt(state)
    cache.allocate(rows, 4)
    tokens = torch.arange(3, 3 + rows)[:, None]
    for pos in range(4):
        with torch.inference_mode(), PeakMemory("cpu") as meter:
            fwd.forward_step(cache, tokens, pos)
        assert 0 < meter.peak_bytes <= rows * fwd.footprint.decode_row_bytes(40 + pos + 1)


def test_an_encoder_gemma_is_refused(model_dir):
    from transformers import AutoModelForCausalLM

    from specrej.engine.engine import forward_pass

    model = AutoModelForCausalLM.from_pretrained(model_dir("gemma3_text"))
    model.config.use_bidirectional_attention = True
    with pytest.raises(SpecrejError, match="bidirectional"):
        forward_pass(model)


# ------------------------------------------------------------------------------------------
# packed weights (engine/linear.py) and the compiled decode step (engine/compiled.py)
# ------------------------------------------------------------------------------------------


def compiled_copy(engine):
    """The engine with its decode step compiled (`compiled.CompiledForward` over a new forward pass
    of the same model), as `load_engine(..., compile="on")` makes it."""
    from specrej.engine.compiled import CompiledForward

    return engine.with_forward(CompiledForward(type(engine.forward)(engine.model)))


def run_rows(engine, prompt_ids, rows: int, steps: int = 12, temperature: float = 1.0):
    """`steps` sampled tokens for `rows` rows, a third of them halted after 5: (tokens, log-probs,
    hidden states) after every step, for comparing two forward passes of one model."""
    params = SamplingParams(temperature=temperature, max_new_tokens=steps)
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), rows, steps, params,
                             torch.Generator().manual_seed(0))
    seen = []
    while rollout.num_rows:
        if rollout.length == 5 and rows > 2:
            rollout.halt(rollout.candidate_ids[::3].tolist())
        rollout.step()
        if rollout.num_rows:
            seen.append((rollout.tokens[:, : rollout.length].clone(), rollout.logprobs[:, : rollout.length].clone(),
                         rollout.hidden.clone()))
    return seen


@pytest.mark.skipif(not packs(torch.device("cpu"), torch.bfloat16), reason="no native bfloat16 oneDNN on this CPU")
@pytest.mark.parametrize("model_type", MODELS)
def test_packed_weights_give_the_bits_of_f_linear(model_dir, model_type):
    """On a CPU in bfloat16 the engine's GEMMs run on packed weights: every token, log-prob and
    hidden state equals, bit for bit, what the same forward pass computes with F.linear on the
    weights as they are, at every batch size the rows pass through (prefill included)."""
    engine = engine_for(model_dir, model_type, "bfloat16")
    assert engine.forward.packed
    plain = engine.with_forward(type(engine.forward)(engine.model, pack_weights=False))
    assert not plain.forward.packed
    prompt_ids = engine.encode_prompt(PROMPT)
    for rows in (1, 5, 16, 33):
        for (tokens, logprobs, hidden), (plain_tokens, plain_logprobs, plain_hidden) in zip(
                run_rows(engine, prompt_ids, rows), run_rows(plain, prompt_ids, rows), strict=True):
            assert torch.equal(tokens, plain_tokens) and torch.equal(logprobs, plain_logprobs)
            assert torch.equal(hidden, plain_hidden)


def test_the_compiled_step_matches_eager_with_one_graph_per_row_range(model_dir, prompts_file,
                                                                     tmp_path, monkeypatch):
    """--compile on: the records carry params.compiled and the same tokens as eager (float32: the
    compiled step differs in the last bits, far from flipping a sampled token); SR's batch, shrinking
    from 12 rows to 6 and as rows finish, runs on one graph for 2-64 rows and one for a single row
    (`row_range`: the rows are a dynamic dimension) and one sampler graph; a model on the fallback
    path is refused in one line."""
    import torch._dynamo

    from specrej.cli.main import main
    from specrej.engine.graph_build import compile_ranges
    from specrej.records.io import read_records

    monkeypatch.setenv("SPECREJ_MEASURE_MEMORY", "0")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    outs = {}
    for setting in ("off", "on"):
        outs[setting] = tmp_path / f"{setting}.jsonl"
        argv = ["generate", "--model", str(model_dir("qwen3")), "--prompts", str(prompts_file), "--out",
                str(outs[setting]), "--method", "sr", "--param", "alpha=0.5", "--param", "max_init_batch=12",
                "--param", "min_tokens=4", "--max-new-tokens", "12", "--memory-budget", "64KiB",
                "--dtype", "float32", "--compile", setting, "--no-progress"]
        assert main(argv) == 0
    eager, compiled = read_records(outs["off"]), read_records(outs["on"])
    assert all("compiled" not in r["params"] for r in eager) and all(r["params"]["compiled"] for r in compiled)
    batch_sizes = set()
    for e, c in zip(eager, compiled, strict=True):
        assert [x["token_ids"] for x in e["candidates"]] == [x["token_ids"] for x in c["candidates"]]
        for a, b in zip(e["candidates"], c["candidates"]):
            assert a["final_score"] == pytest.approx(b["final_score"], abs=1e-5)
        batch_sizes |= {r["batch_before"] for r in c["rounds"]} | {r["batch_after"] for r in c["rounds"]}
    assert len(batch_sizes) >= 2  # the compiled step ran at several batch sizes...
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 3  # ...on a graph per row range, and the sampler's
    # a compiled resume of the eager file is refused once the generator loads, the file left as it was
    first = outs["off"].read_bytes().splitlines(keepends=True)[0]
    outs["off"].write_bytes(first)
    argv[argv.index("--out") + 1], argv[argv.index("--compile") + 1] = str(outs["off"]), "on"
    assert main(argv) == 2 and outs["off"].read_bytes() == first
    fallback = type("Fallback", (), {"kind": "hf"})()
    with pytest.raises(SpecrejError, match="only the engine's own forward passes compile"):
        compile_ranges("on", fallback)
    assert compile_ranges("auto", fallback) == compile_ranges("off", fallback) == ()


def test_compiling_graphs_is_recorded_apart_from_the_compute(model_dir, tmp_path, monkeypatch):
    """The first prompt of a compiled run on an empty cache compiles the step's and the sampler's
    graphs: that time is its record's `timing.graphs_s` and is left out of its compute_s and
    generate_s, so its compute stays with its neighbours' (with the compile counted it would be
    tens of times theirs); a prompt that built no graph names none."""
    import torch._dynamo

    from specrej.cli.main import main
    from specrej.records.io import read_records

    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))  # nothing compiled yet
    monkeypatch.setenv("SPECREJ_MEASURE_MEMORY", "0")
    torch._dynamo.reset()
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"{PROMPT} Number {i}." for i in range(4)) + "\n")
    out = tmp_path / "run.jsonl"
    assert main(["generate", "--model", str(model_dir("qwen3")), "--prompts", str(prompts), "--out", str(out),
                 "--method", "bon", "--n", "16", "--max-new-tokens", "48", "--memory-budget", "64MiB",
                 "--dtype", "float32", "--compile", "on", "--no-progress"]) == 0
    timings = [r["timing"] for r in read_records(out)]
    built = [t for t in timings if "graphs_s" in t]
    assert built and built[0] is timings[0] and all(t["graphs_s"] > 0 for t in built)
    plain = [t["compute_s"] for t in timings if "graphs_s" not in t]
    # a first call's own costs (allocations, a warm cache) stay; the compile's seconds do not
    assert plain and timings[0]["compute_s"] < 5 * max(plain) and timings[0]["compute_s"] < timings[0]["graphs_s"] / 10
    assert timings[0]["generate_s"] < timings[0]["total_s"] - timings[0]["graphs_s"] + 1e-6


@pytest.mark.parametrize("model_type", MODELS)
def test_the_static_step_gives_eager_tokens_across_row_ranges_and_windows(model_dir, model_type):
    """The compiled step over the whole preallocated cache, masked (Gemma 3's sliding windows too:
    the prompt is longer than the window), gives the eager step's tokens in float32 on each of its
    three graphs (1 row; 5 and 16 rows on the one for 2-64; 70 rows on the one above, until a third
    of them are halted mid-way and the 46 left go on the 2-64 one); hidden states within float32
    rounding."""
    engine = engine_for(model_dir, model_type, "float32")
    compiled = compiled_copy(engine)
    prompt_ids = engine.encode_prompt(PROMPT * 3)
    assert len(prompt_ids) > SLIDING_WINDOW
    for rows in (1, 5, 16, 70):
        for (tokens, _, hidden), (c_tokens, _, c_hidden) in zip(
                run_rows(engine, prompt_ids, rows), run_rows(compiled, prompt_ids, rows), strict=True):
            assert torch.equal(tokens, c_tokens)
            assert torch.allclose(hidden, c_hidden, atol=ATOL)
    assert compiled.forward.row_ranges == {"1", "2-64", "65-"}


def test_the_static_step_without_the_attention_kernel_gives_eager_tokens(model_dir, monkeypatch, tmp_path):
    """Where the C++ attention kernel does not run (CUDA; heads not a whole number of vectors), the
    step's attention is inductor's (`attention.attend_static`): forced here on Gemma 3 (sliding
    windows, a prompt longer than the window), tokens as eager's in float32."""
    from specrej.engine import attention

    monkeypatch.setattr(attention, "supported", lambda *args: False)
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path))  # not the kernel's graphs, saved under the same key
    engine = engine_for(model_dir, "gemma3_text", "float32")
    compiled = compiled_copy(engine)
    prompt_ids = engine.encode_prompt(PROMPT * 3)
    for (tokens, _, hidden), (c_tokens, _, c_hidden) in zip(
            run_rows(engine, prompt_ids, 5), run_rows(compiled, prompt_ids, 5), strict=True):
        assert torch.equal(tokens, c_tokens)
        assert torch.allclose(hidden, c_hidden, atol=ATOL)
    assert compiled.forward.module.attention is attention.attend_static


def test_the_compiled_sampler_at_another_temperature_gives_eager_tokens(model_dir):
    """Temperature 1 has a sampler graph of its own (one exponential for the draw and the
    log-probs); any other temperature goes through the tempered graph: tokens and log-probs as
    eager's in float32."""
    engine = engine_for(model_dir, "qwen3", "float32")
    compiled = compiled_copy(engine)
    prompt_ids = engine.encode_prompt(PROMPT)
    for (tokens, logprobs, _), (c_tokens, c_logprobs, _) in zip(
            run_rows(engine, prompt_ids, 5, temperature=0.7), run_rows(compiled, prompt_ids, 5, temperature=0.7),
            strict=True):
        assert torch.equal(tokens, c_tokens)
        assert torch.allclose(logprobs, c_logprobs, atol=1e-5)
    assert "sample-tempered-2-64" in compiled.forward.compiled
    assert "sample-2-64" not in compiled.forward.compiled


COMPILED_ROLLOUT = """
import json, os, sys, torch
import torch._dynamo.utils
from specrej import SamplingParams, load_engine
from specrej.engine import decoding
engine = load_engine(sys.argv[1], dtype="float32", compile="on")
prompt = decoding.prefill(engine.forward, engine.encode_prompt("Write a poem about the sea."))
rollout = engine.rollout(prompt, 4, 3, SamplingParams(max_new_tokens=3), torch.Generator().manual_seed(0))
while rollout.num_rows:
    rollout.step()
one_token = decoding.prefill(engine.forward, [5])  # outside the step graph's shapes: its steps run eagerly


def responses(engine):
    rollout = engine.rollout(one_token, 4, 3, SamplingParams(max_new_tokens=3), torch.Generator().manual_seed(0))
    finished = []
    while rollout.num_rows:
        finished += rollout.step()
    return sorted((row.candidate_id, row.token_ids) for row in finished)


step = engine.forward
print(json.dumps({"stats": torch._dynamo.utils.counters["stats"], "row_ranges": sorted(step.row_ranges),
                  "loaded": sorted(step.loaded), "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
                  "one_token_as_eager": responses(engine) == responses(engine.with_forward(step.forward_pass))}))
"""


def test_a_second_process_takes_the_compiled_graphs_from_the_cache(model_dir, tmp_path):
    """Compiled once per machine: the first process compiles the step and the sampler ahead of time
    into $SPECREJ_CACHE/compiled; a second one (another job of a study) loads both artifacts and
    traces nothing."""
    env = {**os.environ, "SPECREJ_CACHE": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", COMPILED_ROLLOUT, str(model_dir("qwen3"))], env=env,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        runs.append(json.loads(run.stdout.splitlines()[-1]))
    first, second = runs
    assert first["row_ranges"] == second["row_ranges"] == ["2-64"]  # 4 rows: one graph
    assert first["one_token_as_eager"] and second["one_token_as_eager"]
    # inductor's cache was ours only while a graph was compiled or loaded
    assert not str(first["inductor_cache"]).startswith(str(tmp_path))
    assert not str(second["inductor_cache"]).startswith(str(tmp_path))
    assert first["loaded"] == [] and second["loaded"] == ["sample-2-64", "step-2-64"]
    assert sorted(p.name for p in (tmp_path / "cache" / "compiled").glob("*/*.bin")) == ["sample-2-64.bin",
                                                                                     "step-2-64.bin"]
    assert first["stats"]["unique_graphs"] == 2  # traced: the step and the sampler, not for the one-token prompt
    assert any((tmp_path / "cache" / "inductor").iterdir())  # its kernels under $SPECREJ_CACHE, not /tmp
    assert not second["stats"].get("unique_graphs")  # nothing traced


def test_two_jobs_starting_together_compile_each_graph_once(model_dir, tmp_path):
    """Two jobs of a study on an empty cache, started together: for each graph one compiles it and
    the other waits for it (`<artifact>.lock`) and loads it."""
    env = {**os.environ, "SPECREJ_CACHE": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    jobs = [subprocess.Popen([sys.executable, "-c", COMPILED_ROLLOUT, str(model_dir("qwen3"))], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    runs = []
    for job in jobs:
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, err[-2000:]
        runs.append(json.loads(out.splitlines()[-1]))
    assert sum(run["stats"].get("unique_graphs", 0) for run in runs) == 2  # the step and the sampler, once each
    assert sorted(runs[0]["loaded"] + runs[1]["loaded"]) == ["sample-2-64", "step-2-64"]  # the other job loads


def test_a_row_count_takes_the_graph_of_its_range():
    from specrej.engine.compiled import row_range

    assert [row_range(rows) for rows in (1, 2, 15, 64, 65, 128, 4096)] == [
        "1", "2-64", "2-64", "2-64", "65-", "65-", "65-"]  # PACKED_MAX_ROWS = 64: packed GEMMs up to it


def test_the_compiled_graphs_are_keyed_on_the_engines_code_not_its_text(tmp_path):
    from specrej.engine.graph_cache import code_digest

    source = tmp_path / "step.py"
    source.write_text('"""A step."""\n\ndef step(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    before = code_digest([source])
    source.write_text('"""A step, redocumented."""\n\n\ndef step(x):\n    """x, twice."""\n\n    return 2 * x\n')
    assert code_digest([source]) == before  # docstrings, comments and layout
    source.write_text('"""A step."""\n\ndef step(x):\n    """Twice x."""\n    return 3 * x\n')
    assert code_digest([source]) != before


def test_the_samplers_inverse_cdf_finds_the_full_cumsums_index():
    """`inverse_cdf` (block sums, then one block's cumulative sum) gives the index that searchsorted
    on the whole cumulative sum gives, in float64 where rounding cannot tell them apart: vocabularies
    not a multiple of the block, draws at 0, at block boundaries and near 1, zero-weight tokens
    (never chosen), one positive token at the vocabulary's end."""
    from specrej.engine.sampler import CDF_BLOCK, inverse_cdf

    generator = torch.Generator().manual_seed(0)
    for vocab in (7, CDF_BLOCK, 3 * CDF_BLOCK + 5):
        weights = torch.rand(6, vocab, generator=generator, dtype=torch.float64)
        weights[1, ::2] = 0  # every other token impossible
        weights[2, :-1] = 0  # only the last token possible
        weights[3, : vocab // 2] = 0
        total = weights.sum(-1, keepdim=True)
        u = torch.rand(6, 1, generator=generator, dtype=torch.float64)
        u[0], u[4] = 0.0, 1 - 2**-40
        u[5] = (weights[5, : min(CDF_BLOCK, vocab - 1)].sum() / total[5]).item()  # exactly a block's end
        expected = torch.searchsorted(weights.cumsum(-1), u * total, right=True).clamp_max(vocab - 1)
        chosen = inverse_cdf(weights, u)
        assert torch.equal(chosen, expected), vocab
        assert (weights.gather(-1, chosen) > 0).all()
    # hand-worked: weights 1, 0, 3 (total 4); u = 0.2 -> 0.8 < 1: token 0; u = 0.5 -> 2: token 2
    assert inverse_cdf(torch.tensor([[1.0, 0.0, 3.0]] * 2), torch.tensor([[0.2], [0.5]])).tolist() == [[0], [2]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_decode_attention_kernel_matches_softmax_attention_in_float64(dtype):
    """`attention.decode_attention` (C++), against attention written out in float64 over the
    prompt's keys and each row's own keys up to `pos`: no window, a window starting inside the
    prompt, one starting inside the rows' own keys; groups of 1, 3 and 4 queries per KV head, one
    row and several; the cache's rows a slice of a larger buffer (its layout in the engine)."""
    from specrej.engine.attention import decode_attention

    generator = torch.Generator().manual_seed(0)
    atol = 1e-5 if dtype == torch.float32 else 0.02  # bf16 inputs and outputs: one ulp of values below 2
    for rows, kv_heads, group, head_dim, prompt_len, pos, first_visible in (
            (5, 2, 3, 16, 7, 4, 0), (1, 1, 4, 32, 9, 0, 0), (4, 3, 1, 16, 6, 10, 3), (3, 2, 2, 16, 5, 9, 8)):
        def draw(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        q, prompt_k, prompt_v = draw(kv_heads, rows * group, head_dim), draw(kv_heads, prompt_len, head_dim), \
            draw(kv_heads, prompt_len, head_dim)
        buffer_k, buffer_v = draw(rows + 2, kv_heads, pos + 3, head_dim), draw(rows + 2, kv_heads, pos + 3, head_dim)
        q, prompt_k, prompt_v, buffer_k, buffer_v = (t.to(dtype).double() for t in (q, prompt_k, prompt_v, buffer_k,
                                                                                     buffer_v))
        k, v = buffer_k[1 : rows + 1].to(dtype), buffer_v[1 : rows + 1].to(dtype)
        scale = head_dim**-0.5
        prompt_scores = (q @ prompt_k.transpose(1, 2)).to(dtype)
        probs, own_out = decode_attention(q.to(dtype), prompt_scores, k, v, torch.tensor(pos),
                                          torch.tensor(first_visible), scale)
        # float64 reference: per row and query, softmax over the visible prompt and own positions
        by_row = q.view(kv_heads, rows, group, head_dim).transpose(0, 1)  # [rows, kv_heads, group, d]
        values = torch.cat([prompt_v.expand(rows, -1, -1, -1), v.double()[:, :, : pos + 1]], 2)
        scores = torch.cat([prompt_scores.double().view(kv_heads, rows, group, prompt_len).transpose(0, 1),
                            by_row @ k.double()[:, :, : pos + 1].transpose(-1, -2)], -1) * scale
        visible = torch.arange(prompt_len + pos + 1) >= first_visible
        expected = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        expected_prompt = expected[..., :prompt_len].transpose(0, 1).reshape(kv_heads, rows * group, prompt_len)
        assert torch.allclose(probs.double(), expected_prompt, atol=atol)
        assert (probs[..., : min(first_visible, prompt_len)] == 0).all()
        assert torch.allclose(own_out.double(), expected[..., prompt_len:] @ values[:, :, prompt_len:], atol=atol)
        total = expected_prompt.view(kv_heads, rows, group, prompt_len).transpose(0, 1) @ prompt_v + own_out.double()
        assert torch.allclose(total, expected @ values, atol=2 * atol)


def test_a_ranges_measurement_is_added_to_those_kept_not_put_in_their_place(tmp_path):
    """A study builds its row ranges in separate jobs: each one's measurement joins the others'."""
    from specrej.engine.graph_cache import read_measurement, write_measurement

    first = {"rows": 16, "eager_s": 2.0, "compiled_s": 1.0}
    write_measurement(tmp_path / "graphs", {"threads": 1, "tokens": 8, "ranges": {"2-64": first}})
    write_measurement(tmp_path / "graphs", {"threads": 1, "tokens": 8, "ranges": {"1": {**first, "rows": 1}}})
    write_measurement(tmp_path / "graphs", {"threads": 2, "tokens": 8, "ranges": {"65-": {**first, "rows": 128}}})
    assert read_measurement(tmp_path / "graphs", 1)["ranges"] == {"2-64": first, "1": {**first, "rows": 1}}
    assert list(read_measurement(tmp_path / "graphs", 2)["ranges"]) == ["65-"]  # another thread count: its own


def test_specrej_compile_builds_the_graphs_and_auto_follows_its_measurement(model_dir, tmp_path, monkeypatch, capsys):
    """`specrej compile` builds a range's graphs and keeps eager and compiled step times beside them;
    --compile auto then runs compiled on exactly the ranges whose graphs are there and whose
    measurement at this thread count says compiled is faster, eager where any of that is missing."""
    import torch._dynamo

    from specrej import load_engine
    from specrej.cli.main import main
    from specrej.engine.graph_cache import artifact_dir, measurement_path, write_measurement

    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path / "cache"))
    torch._dynamo.reset()
    path = str(model_dir("qwen3"))
    assert load_engine(path, dtype="float32", compile="auto").compiled is False  # nothing built: eager
    assert main(["compile", "--model", path, "--dtype", "float32", "--rows", "4", "--tokens", "3",
                 "--repeats", "1", "--threads", "1"]) == 0
    assert "4 rows (2-64): eager" in capsys.readouterr().out
    engine = load_engine(path, dtype="float32", compile="off")
    artifacts = artifact_dir(engine.forward)
    measured = json.loads(measurement_path(artifacts, 1).read_text())
    assert measured["threads"] == 1 and list(measured["ranges"]) == ["2-64"]
    assert measured["ranges"]["2-64"]["rows"] == 4 and min(measured["ranges"]["2-64"].values()) > 0
    # --if-missing finds them (nothing rebuilt or re-timed); --out keeps a copy with the ranges auto runs compiled
    out = tmp_path / "graphs" / "tiny.json"
    argv = ["compile", "--model", path, "--dtype", "float32", "--rows", "4", "--threads", "1", "--if-missing"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "not rebuilt" in capsys.readouterr().out
    kept = json.loads(out.read_text())
    assert kept["ranges"] == measured["ranges"] and kept["measured_at"] == measured["measured_at"]
    assert kept["compiled_ranges"] == (["2-64"] if measured["ranges"]["2-64"]["compiled_s"]
                                       < measured["ranges"]["2-64"]["eager_s"] else [])
    users = tmp_path / "notes.json"
    users.write_text('{"mine": 1}\n')
    assert main([*argv, "--out", str(users)]) == 2  # not a measurement: refused, left as it was
    assert "not a specrej compile measurement" in capsys.readouterr().err and users.read_text() == '{"mine": 1}\n'

    def auto(eager_s, compiled_s, threads=1):
        write_measurement(artifacts, {"threads": threads, "tokens": 3, "ranges": {
            "2-64": {"rows": 4, "eager_s": eager_s, "compiled_s": compiled_s},
            "65-": {"rows": 128, "eager_s": 2.0, "compiled_s": 1.0}}})  # faster, but its graphs were not built
        engine = load_engine(path, dtype="float32", compile="auto")
        return sorted(engine.forward.ranges) if engine.compiled else []

    torch.set_num_threads(1)
    assert auto(eager_s=2.0, compiled_s=1.0) == ["2-64"]
    assert auto(eager_s=1.0, compiled_s=2.0) == []  # measured slower: eager
    measurement_path(artifacts, 1).unlink()
    assert auto(eager_s=2.0, compiled_s=1.0, threads=2) == []  # measured at another thread count
    (artifacts / "sample-2-64.bin").unlink()
    assert auto(eager_s=2.0, compiled_s=1.0) == []  # a graph missing
    # a compiled range runs its graph, the others the eager step
    engine = load_engine(path, dtype="float32", compile="on")
    engine.forward.ranges = {"2-64"}
    rollout = engine.rollout(decoding.prefill(engine.forward, engine.encode_prompt(PROMPT)), 1, 2,
                             SamplingParams(max_new_tokens=2), torch.Generator().manual_seed(0))
    while rollout.num_rows:
        rollout.step()
    assert "step-1" not in engine.forward.compiled


def test_each_attention_of_the_one_signature_matches_softmax_attention_in_float64():
    """The decode step's attention implementations (`attention.attend_exact`, eager; `attend_static`,
    inductor's; `attend_kernel`, the C++ kernel) take the same arguments and give the same attention,
    against attention written out in float64: no window, a window starting inside the prompt, one
    inside the rows' own keys; the exact one reads the slots up to `pos`, the static one a longer
    span whose tail it masks, the kernel the whole buffer."""
    from specrej.engine.attention import attend_exact, attend_kernel, attend_static

    generator = torch.Generator().manual_seed(1)
    for rows, kv_heads, group, head_dim, prompt_len, pos, first_visible in (
            (3, 2, 3, 16, 7, 4, 0), (1, 1, 4, 32, 9, 0, 0), (4, 3, 1, 16, 6, 10, 3), (2, 2, 2, 16, 5, 9, 8)):
        def draw(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        q = draw(rows, kv_heads * group, 1, head_dim)
        prompt_k, prompt_v = draw(kv_heads, prompt_len, head_dim), draw(kv_heads, prompt_len, head_dim)
        k, v = draw(rows, kv_heads, pos + 3, head_dim), draw(rows, kv_heads, pos + 3, head_dim)
        scale = head_dim**-0.5
        # float64 reference, per row and query head: softmax over every visible key, prompt then own
        keys = torch.cat([prompt_k.expand(rows, -1, -1, -1), k[:, :, : pos + 1]], 2).repeat_interleave(group, 1)
        values = torch.cat([prompt_v.expand(rows, -1, -1, -1), v[:, :, : pos + 1]], 2).repeat_interleave(group, 1)
        visible = torch.arange(prompt_len + pos + 1) >= first_visible
        expected = ((q @ keys.transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf")).softmax(-1) @ values
        exact = attend_exact(q.float(), prompt_k.float(), prompt_v.float(), k[:, :, : pos + 1].float(),
                             v[:, :, : pos + 1].float(), pos, first_visible, scale)
        static = attend_static(q.float(), prompt_k.float(), prompt_v.float(), k[:, :, : pos + 2].float(),
                               v[:, :, : pos + 2].float(), torch.tensor(pos), torch.tensor(first_visible), scale)
        kernel = attend_kernel(q.float(), prompt_k.float(), prompt_v.float(), k.float(), v.float(),
                               torch.tensor(pos), torch.tensor(first_visible), scale)
        for out in (exact, static, kernel):
            assert out.shape == (rows, kv_heads * group, 1, head_dim)
            assert torch.allclose(out.double(), expected, atol=1e-5)


def test_the_attention_is_chosen_per_device_and_step():
    """Eager steps attend exactly on every device; a compiled step runs the C++ kernel on a CPU in
    float32 or bfloat16 with heads a whole number of 16-float vectors, inductor's code elsewhere
    (CUDA, float16, other head sizes)."""
    from specrej.engine.attention import attend_exact, attend_kernel, attend_static, attention_for

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for device in (cpu, cuda):
        assert attention_for(device, torch.bfloat16, 64, compiled=False) is attend_exact
    assert attention_for(cpu, torch.bfloat16, 64, compiled=True) is attend_kernel
    assert attention_for(cpu, torch.float32, 32, compiled=True) is attend_kernel
    assert attention_for(cuda, torch.bfloat16, 64, compiled=True) is attend_static
    assert attention_for(cpu, torch.float16, 64, compiled=True) is attend_static
    assert attention_for(cpu, torch.bfloat16, 24, compiled=True) is attend_static
