"""The memory contract, measured: a prompt's run allocates at most budget + Engine.memory_margin.

`measured_peak_bytes` comes from the allocator on CUDA and from budget.StorageTracker on CPU.
The engine's chunk sizes are made small here, so that the margin is small beside the budget and
an allocation that grew with rows or length (a second batch's cache, a whole-batch decode step,
prompt KV held as views) would break the bound.
"""

import pytest
import torch

from specrej import LogProbReward, SamplingParams, SpecrejError, best_of_n, load_reward, speculative_rejection
from specrej.api import run_one, run_prompts
from specrej.engine import decoding
from specrej.engine.budget import PeakMemory, storage_bytes, token_capacity
from specrej.engine.decoding import Rollout
from specrej.methods.out_of_memory import is_out_of_memory
from specrej.methods.session import Session

PROMPT = "Write a poem about the sea."
SAMPLING = SamplingParams(max_new_tokens=24)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device"))]
# CUDA: the caching allocator rounds each block up to 512 bytes; a few dozen small tensors live
# at once in a decode step of the tiny model
CUDA_ROUNDING = 2**16


@pytest.fixture(autouse=True)
def measure(monkeypatch):
    """The meter is off by default on CPU (it costs time); these tests turn it on."""
    monkeypatch.setenv("SPECREJ_MEASURE_MEMORY", "1")


@pytest.fixture(params=DEVICES)
def small_chunk_engine(request, engine, generator_dir, monkeypatch):
    """The tiny generator (on CPU, or on CUDA) with small decode and sampling chunks."""
    if request.param == "cuda":
        from specrej import load_engine

        engine = load_engine(str(generator_dir), device="cuda")
        best_of_n(engine, LogProbReward(), PROMPT, n=4, memory_budget=2**24, sampling=SAMPLING)  # cuBLAS warm-up
    monkeypatch.setattr(engine, "decode_chunk_bytes", 2**18)
    monkeypatch.setattr(engine, "sample_chunk_rows", 64)
    return engine


def budget_for(engine, slots: int) -> int:
    """The smallest budget whose token capacity holds `slots` generated tokens beside the prompt."""
    prompt_len = len(engine.encode_prompt(PROMPT))
    budget = engine.kv_bytes_per_token * (prompt_len + slots)
    while token_capacity(budget, engine.kv_bytes_per_token, prompt_len, len(engine.layers)) < slots:
        budget += engine.kv_bytes_per_token
    return budget


def assert_within(result, budget, engine):
    allowance = CUDA_ROUNDING if engine.device.type == "cuda" else 0
    assert 0 < result.peak_kv_bytes <= budget
    assert result.measured_peak_bytes is not None and result.measured_peak_bytes > result.peak_kv_bytes // 2
    assert result.measured_peak_bytes <= budget + result.memory_margin_bytes + allowance, (
        f"measured {result.measured_peak_bytes} > budget {budget} + margin {result.memory_margin_bytes}")


def test_best_of_n_in_several_batches_holds_one_batch(small_chunk_engine):
    engine = small_chunk_engine
    budget = budget_for(engine, 16 * SAMPLING.max_new_tokens)
    result = best_of_n(engine, LogProbReward(), PROMPT, n=64, batch_size=16, memory_budget=budget, sampling=SAMPLING)
    assert len(result.candidates) == 64 and all(c.complete for c in result.candidates)
    assert_within(result, budget, engine)
    # four batches' caches resident at once would be about 4 x the budget
    assert result.measured_peak_bytes < 2 * budget


def test_speculative_rejection_with_many_rounds_and_a_relayout(small_chunk_engine, monkeypatch):
    engine = small_chunk_engine
    relaid = []
    relayout = Rollout.relayout
    monkeypatch.setattr(Rollout, "relayout", lambda self, max_len: (relaid.append(max_len), relayout(self, max_len)))
    sampling = SamplingParams(max_new_tokens=48)
    budget = budget_for(engine, 600)
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=0.5,
                                   memory_budget=budget, sampling=sampling, min_tokens=4)
    assert len(result.rounds) >= 3 and relaid, "the budget must force several decisions and a re-layout"
    assert_within(result, budget, engine)


def test_an_initial_batch_in_the_thousands(small_chunk_engine):
    engine = small_chunk_engine
    b_init, min_tokens = 2000, 4
    budget = budget_for(engine, b_init * min_tokens)
    result = speculative_rejection(engine, LogProbReward(), PROMPT, alpha=0.5, memory_budget=budget,
                                   sampling=SAMPLING, min_tokens=min_tokens, max_init_batch=b_init)
    assert result.params["init_batch_size"] == b_init and result.rounds
    assert_within(result, budget, engine)


def test_the_margin_is_needed_and_a_whole_batch_decode_step_would_break_it(engine, monkeypatch):
    """Without decode chunks (one step over all 2000 rows) the measured peak leaves the bound:
    the test above would catch that regression."""
    monkeypatch.setattr(engine, "sample_chunk_rows", 64)
    budget = budget_for(engine, 2000 * 4)
    kwargs = dict(alpha=0.5, memory_budget=budget, sampling=SAMPLING, min_tokens=4, max_init_batch=2000)
    monkeypatch.setattr(engine, "decode_chunk_bytes", 2**18)
    chunked = speculative_rejection(engine, LogProbReward(), PROMPT, **kwargs)
    monkeypatch.setattr(engine, "decode_chunk_bytes", 2**40)
    whole = speculative_rejection(engine, LogProbReward(), PROMPT, **kwargs)
    assert whole.measured_peak_bytes > chunked.measured_peak_bytes + 2000 * engine.forward.footprint.decode_row_bytes(16) // 4
    assert whole.measured_peak_bytes > budget + chunked.memory_margin_bytes


def test_the_prompt_kv_is_its_own_storage_and_counted_by_storage(engine):
    prompt = decoding.prefill(engine.forward, engine.encode_prompt(PROMPT))
    for t in prompt.state.k + prompt.state.v:
        assert t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    big = torch.zeros(4, 100)
    assert storage_bytes([big[:1], big[1:2]]) == big.numel() * 4  # one storage, whole, once


def test_a_finished_batch_is_released_before_the_next(engine, monkeypatch):
    live = []
    start = Session.start

    def watch(self, rows, max_len=None, **options):
        rollout = start(self, rows, max_len, **options)
        live.append(sum(bool(r.cache.k) for r in self.rollouts))
        return rollout

    monkeypatch.setattr(Session, "start", watch)
    result = best_of_n(engine, LogProbReward(), PROMPT, n=12, batch_size=4, memory_budget=2**30, sampling=SAMPLING)
    assert live == [1, 1, 1]
    assert result.tokens["generated"] >= sum(c.num_tokens for c in result.candidates)


def test_storage_tracker_counts_new_storages_until_freed():
    with PeakMemory("cpu") as meter:
        a = torch.empty(1000)  # 4000 bytes
        view = a[:10].t()  # no allocation
        a.add_(1)  # in place: none
        b = torch.empty(250)  # 1000 bytes: 5000 live
        del a, view, b
        c = torch.ones(1000, dtype=torch.float64)  # 8000 bytes, the earlier ones freed
        del c
    assert 8000 <= meter.peak_bytes < 8100  # (a scalar operand may be wrapped in a tensor)


def test_measurement_can_be_turned_off_and_is_off_by_default_on_cpu(engine, monkeypatch):
    result = best_of_n(engine, LogProbReward(), PROMPT, n=2, memory_budget=2**30, sampling=SAMPLING,
                       measure_memory=False)
    assert result.measured_peak_bytes is None and result.to_record(0)["measured_peak_bytes"] is None
    monkeypatch.delenv("SPECREJ_MEASURE_MEMORY")
    assert best_of_n(engine, LogProbReward(), PROMPT, n=2, memory_budget=2**30,
                     sampling=SAMPLING).measured_peak_bytes is None
    assert best_of_n(engine, LogProbReward(), PROMPT, n=2, memory_budget=2**30, sampling=SAMPLING,
                     measure_memory=True).measured_peak_bytes > 0


# -- out of memory ---------------------------------------------------------------------------

def fail_once_above(engine, monkeypatch, rows: int, error=None):
    """The engine's decode step raises an out-of-memory error once, when it has more than `rows` rows."""
    decode = decoding.decode_one_token
    failed = []

    def decode_one_token(model, cache, tokens, pos, chunk_rows, layer_states=None):
        if tokens.shape[0] > rows and not failed:
            failed.append(tokens.shape[0])
            raise error or torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return decode(model, cache, tokens, pos, chunk_rows, layer_states)

    monkeypatch.setattr(decoding, "decode_one_token", decode_one_token)
    return failed


@pytest.mark.parametrize("error", [None, MemoryError(),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate")])
def test_best_of_n_out_of_memory_is_retried_with_half_the_batch(engine, monkeypatch, error):
    failed = fail_once_above(engine, monkeypatch, 8, error)
    with pytest.warns(UserWarning, match="retrying the prompt with 8"):
        result = run_one(engine, LogProbReward(), PROMPT, method="bon", n=16, batch_size=16, memory_budget=2**30,
                         sampling=SAMPLING)
    assert len(failed) == 1 and result.retries == 1 and result.params["batch_size"] == 8
    assert len(result.candidates) == 16 and all(c.complete for c in result.candidates)
    # never truncated: every response ended with a stop token or ran to max_new_tokens
    assert all(c.finished or c.num_tokens == SAMPLING.max_new_tokens for c in result.candidates)
    assert result.to_record(0)["retries"] == 1


def test_speculative_rejection_out_of_memory_halves_b_init(engine, monkeypatch):
    fail_once_above(engine, monkeypatch, 16)
    with pytest.warns(UserWarning, match="batch of 64"):
        result = run_one(engine, LogProbReward(), PROMPT, method="sr", alpha=0.5, batch_size=64,
                         memory_budget=2**30, sampling=SAMPLING, decision_tokens=[4])
    assert result.retries == 1 and result.params["init_batch_size"] == 32 and len(result.candidates) == 32


def test_the_default_batch_is_halved_too(engine, monkeypatch):
    fail_once_above(engine, monkeypatch, 6)
    with pytest.warns(UserWarning, match="batch of 12"):
        result = run_one(engine, LogProbReward(), PROMPT, method="bon", n=12, memory_budget=2**30, sampling=SAMPLING)
    assert result.retries == 1 and result.params["batch_size"] == 6 and len(result.candidates) == 12


def test_a_prompt_out_of_memory_even_with_one_row_gets_an_error_record_and_the_run_goes_on(
        engine, monkeypatch, tmp_path):
    from specrej.records.io import read_records

    decode = decoding.decode_one_token

    def decode_one_token(model, cache, tokens, pos, chunk_rows, layer_states=None):
        if "gravity" in engine._current:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return decode(model, cache, tokens, pos, chunk_rows, layer_states)

    encode = engine.encode_prompt

    def encode_prompt(prompt):
        engine._current = prompt
        return encode(prompt)

    monkeypatch.setattr(decoding, "decode_one_token", decode_one_token)
    monkeypatch.setattr(engine, "encode_prompt", encode_prompt)
    monkeypatch.setattr(engine, "_current", "", raising=False)
    from specrej.records.prompts import PromptItem

    items = [PromptItem("a", "Explain gravity to a child."), PromptItem("b", PROMPT)]
    with pytest.warns(UserWarning):
        writer = run_prompts(items, tmp_path / "out.jsonl", engine=engine, reward=LogProbReward(), method="bon",
                             model_name="tiny", reward_name="logprob", n=4, sampling=SAMPLING, progress=False,
                             memory_budget=2**30)
    records = {r["prompt_id"]: r for r in read_records(tmp_path / "out.jsonl")}
    assert "out of memory with a batch of 1" in records["a"]["error"] and set(writer.errors) == {"a"}
    assert records["b"]["retries"] == 0 and len(records["b"]["candidates"]) == 4
    assert records["b"]["measured_peak_bytes"] > 0


def test_other_errors_are_not_taken_for_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("x")) and is_out_of_memory(MemoryError())
    assert not is_out_of_memory(RuntimeError("shape mismatch")) and not is_out_of_memory(SpecrejError("no"))


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.7), SamplingParams(temperature=0),
                                    SamplingParams(top_p=0.9), SamplingParams(temperature=0.7, top_p=0.9),
                                    SamplingParams(temperature=0.7, top_p=0.9, top_k=50)])
def test_the_sampler_stays_within_its_copies(engine, params):
    from specrej.engine import sampler
    from specrej.engine.sampler import sampler_bytes

    rows = 64
    hidden = torch.randn(rows, engine.config.hidden_size)
    with PeakMemory("cpu") as meter:
        sampler.sample(engine.forward, hidden, params, torch.Generator().manual_seed(0), engine.sample_chunk_rows)
    # the copies of the logits, plus the sampled tokens and log-probs (int64 and fp32, and their cat)
    assert meter.peak_bytes <= sampler_bytes(params, rows, engine.config.vocab_size) + rows * 32


@pytest.mark.parametrize("model_type", ["olmo2", "gemma2"])
def test_the_fallback_forward_pass_keeps_the_memory_contract(tiny_model_dir, monkeypatch, model_type):
    """The fallback (hf_forward.HFForward: the model's own forward and cache) under SR with a budget
    that forces decisions: the measured peak stays within budget + margin (the margin counts an
    unchunked decode step and the fallback's extra_cache_bytes), and the cache's own peak within
    budget + extra_cache_bytes: for olmo2 (all layers full attention, the prompt held once) only the
    prompt's part of one layer in flight, for gemma2 also each row's copy of its sliding layer's
    prompt part."""
    from specrej import load_engine

    engine = load_engine(str(tiny_model_dir(model_type)))
    assert engine.forward_kind == "hf"
    monkeypatch.setattr(engine, "sample_chunk_rows", 64)
    sampling = SamplingParams(max_new_tokens=32)
    budget = budget_for(engine, 300)
    result = speculative_rejection(engine, load_reward("python:toy_rewards:letter_e"), PROMPT, alpha=0.5,
                                   memory_budget=budget, sampling=sampling, min_tokens=4)
    assert len(result.rounds) >= 2 and result.params["forward"] == "hf"
    prompt_len, b_init = len(engine.encode_prompt(PROMPT)), result.params["init_batch_size"]
    assert result.measured_peak_bytes <= budget + result.memory_margin_bytes
    assert 0 < result.peak_kv_bytes <= budget + engine.forward.footprint.extra_cache_bytes(prompt_len, b_init)


# The bytes each forward pass counted before its footprint became an object of its own (main at
# 61559d5, `ForwardPass.kv_bytes_per_token`, `decode_row_bytes` at contexts 1, 37, 300,
# `prefill_bytes` at prompts 5 and 40, `extra_cache_bytes` at (40 tokens, 7 rows) and (5, 1)), for
# the tiny models of conftest in float32.
FOOTPRINTS_BEFORE = {
    "llama": (512, [4688, 7568, 28608], [25440, 337920], [0, 0]),
    "qwen3": (512, [5712, 8592, 29632], [30560, 378880], [0, 0]),
    "gemma3_text": (512, [8528, 11408, 32448], [44765, 499520], [0, 0]),
    "olmo2": (512, [18000, 39312, 195008], [108000, 1692800], [71680, 1280]),  # the fallback
    "gemma2": (512, [18000, 39312, 195008], [108000, 1692800], [143360, 2560]),  # the fallback, sliding layers
}


@pytest.mark.parametrize("model_type", FOOTPRINTS_BEFORE)
def test_the_footprint_counts_the_bytes_it_counted_before(model_type, generator_dir, tiny_model_dir):
    from specrej import load_engine

    path = generator_dir if model_type == "llama" else tiny_model_dir(model_type)
    footprint = load_engine(str(path), dtype="float32").forward.footprint
    kv, rows, prefill, extra = FOOTPRINTS_BEFORE[model_type]
    assert footprint.kv_bytes_per_token == kv
    assert [footprint.decode_row_bytes(c) for c in (1, 37, 300)] == rows
    assert [footprint.prefill_bytes(p) for p in (5, 40)] == prefill
    assert [footprint.extra_cache_bytes(40, 7), footprint.extra_cache_bytes(5, 1)] == extra
