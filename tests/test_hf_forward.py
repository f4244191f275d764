"""Other architectures: the fallback forward pass (specrej/engine/hf_forward.py) for any causal LM, and the
engine's own forward pass on Mistral, Qwen2, Qwen3 and Gemma 3 (float32 and bfloat16), against Hugging Face's own
full forward pass over the same tokens.

Tolerances: float32, absolute 1e-4 on logits (the same model, a different order of operations: the
cached one-token steps against one pass over the whole sequence); bfloat16, see BF16_ATOL.
"""

import logging

import pytest
import torch

from specrej import LogProbReward, SamplingParams, best_of_n, load_engine, speculative_rejection
from specrej.engine import decoding

FALLBACK = ["gemma2", "phi3", "olmo2", "gpt_neox", "gpt2", "jamba", "mamba"]
FAST = ["mistral", "qwen2", "qwen3", "gemma3_text"]
PROMPT = "Write a poem about the sea."
ATOL = 1e-4
# bfloat16: both passes round every op's output to 8 significant bits, in a different order
# (fast path: fused q/k/v and gate/up GEMMs, shared-prompt attention; fallback: one-token cached
# steps against one pass over the sequence). The logits of these tiny models are at most ~2.6,
# where a bf16 ulp is 2**-6 = 0.0156; measured: at most 0.0105 (mistral, qwen2, gpt_neox, qwen3;
# gemma2 0) after 10 steps. Tolerance: 0.05 absolute, about 3 ulps.
BF16_ATOL, BF16_RTOL = 0.05, 0.0


def reference_logits(model, prompt_ids, rows_tokens):
    """Logits at every position from a fresh HF forward over prompt + each row's tokens (no cache)."""
    with torch.no_grad():
        return model(torch.tensor([prompt_ids + row for row in rows_tokens], device=model.device)).logits.float()


def rollout_for(engine, rows, seed=0, max_new_tokens=32):
    prompt_ids = engine.encode_prompt(PROMPT)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    return prompt_ids, engine.rollout(decoding.prefill(engine.forward, prompt_ids), rows, max_new_tokens, params,
                                      torch.Generator().manual_seed(seed))


def live_tokens(rollout):
    return rollout.tokens[:, : rollout.length].tolist()


def assert_matches_hf(engine, prompt_ids, rollout, atol=ATOL, rtol=0.0):
    """The rollout's next-token logits and every sampled token's log-prob equal HF's full forward."""
    tokens = live_tokens(rollout)
    ref = reference_logits(engine.model, prompt_ids, tokens)
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), ref[:, -1], atol=atol, rtol=rtol)
    steps = rollout.length
    if steps:
        predicted = ref[:, len(prompt_ids) - 1 : -1].log_softmax(-1)  # position i predicts token i
        ref_logprobs = predicted.gather(-1, torch.tensor(tokens)[..., None])[..., 0]
        torch.testing.assert_close(rollout.logprobs[:, :steps], ref_logprobs, atol=atol * 10, rtol=rtol)


@pytest.fixture(params=FALLBACK)
def fallback_engine(request, tiny_model_dir):
    engine = load_engine(str(tiny_model_dir(request.param)))
    assert engine.forward_kind == "hf" and engine.config.model_type == request.param
    return engine


def test_fallback_logits_and_logprobs_equal_hf(fallback_engine):
    """(a) Prompt + sampled continuation: the fallback's logits equal HF's full forward (and the
    log-probs it records are HF's); the shared prompt is prefilled once, at batch 1."""
    engine = fallback_engine
    engine.stop_token_ids = torch.tensor([-1])  # no row finishes: the test controls the rows
    prompt_ids, rollout = rollout_for(engine, rows=5)
    assert_matches_hf(engine, prompt_ids, rollout)  # the prefill alone
    for _ in range(12):  # past gemma's sliding window of 8 (prompt + 12 tokens)
        rollout.step()
    assert_matches_hf(engine, prompt_ids, rollout)
    assert rollout.cache.rows == 5
    if not all(rollout.cache.cache.is_linear):  # mamba's cache has no sequence length
        assert rollout.cache.cache.get_seq_length() == len(prompt_ids) + 12


def test_fallback_pruned_rows_continue_as_a_fresh_forward_would(fallback_engine):
    """(b) Rows halted and finished mid-generation are index-selected out of the model's own
    cache; the survivors go on exactly as a fresh forward pass over their full sequences."""
    engine = fallback_engine
    engine.stop_token_ids = torch.tensor([-1])
    prompt_ids, rollout = rollout_for(engine, rows=6, seed=1)
    for _ in range(5):
        rollout.step()
    halted = rollout.candidate_ids[[0, 3, 4]].tolist()
    assert sorted(o.candidate_id for o in rollout.halt(halted)) == sorted(halted)
    assert rollout.num_rows == rollout.cache.rows == 3
    assert_matches_hf(engine, prompt_ids, rollout)
    rollout.relayout(40)  # no physical re-layout: bookkeeping only
    assert rollout.cache.max_len == 40
    # rows finishing on a frequent token are pruned at the step they finish
    logits = engine.forward.logits(rollout.hidden)
    rollout.stop_token_ids = logits.topk(30).indices.unique()  # a rollout keeps its own stop tokens
    finished = []
    for _ in range(6):
        if rollout.num_rows:
            finished += rollout.step()
        if rollout.num_rows:
            assert rollout.cache.rows == rollout.num_rows
            assert_matches_hf(engine, prompt_ids, rollout)
    assert finished, "expected a row to end on a stop token"


def test_fallback_alpha_zero_with_b_init_n_is_best_of_n(fallback_engine):
    """(c) Through specrej.algorithms: alpha = 0 with b_init = N keeps every row at every decision,
    so it is Best-of-N: same responses, same log-probs, same scores; the record names the path."""
    engine = fallback_engine
    sampling = SamplingParams(max_new_tokens=12)
    engine.stop_token_ids = torch.cat([engine.stop_token_ids, engine.forward.logits(decoding.prefill(engine.forward, 
        engine.encode_prompt(PROMPT)).hidden[None]).topk(4).indices[0, 1:]])  # some rows finish early
    bon = best_of_n(engine, LogProbReward(), PROMPT, n=6, batch_size=6, memory_budget=2**26, sampling=sampling, seed=3)
    sr = speculative_rejection(engine, LogProbReward(), PROMPT, alpha=0.0, init_batch_size=6, memory_budget=2**26,
                               sampling=sampling, seed=3, decision_tokens=[3, 6])
    assert sr.rounds and all(r.batch_after == r.batch_before for r in sr.rounds)
    assert [(c.token_ids, c.token_logprobs, c.final_score) for c in sr.candidates] == \
        [(c.token_ids, c.token_logprobs, c.final_score) for c in bon.candidates]
    assert sr.best.id == bon.best.id
    assert sr.params["forward"] == bon.params["forward"] == "hf"
    assert sr.to_record(0)["params"]["forward"] == "hf"


def test_the_fallback_is_logged_and_the_fast_path_is_not(tiny_model_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="specrej"):
        assert load_engine(str(tiny_model_dir("gpt2"))).forward_kind == "hf"
    assert [r for r in caplog.records if "'gpt2'" in r.getMessage() and "fallback" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="specrej"):
        assert load_engine(str(tiny_model_dir("qwen2"))).forward_kind == "llama"
    assert not [r for r in caplog.records if "fallback" in r.getMessage()]


def test_fallback_memory_accounting_is_measured_from_the_models_cache(tiny_model_dir):
    """kv_bytes_per_token is what the model's cache grows by per token (all layers), and the
    cache's peak is what its storages held: each row's prompt copy included."""
    engine = load_engine(str(tiny_model_dir("olmo2")))
    fwd = engine.forward
    assert fwd.footprint.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # k and v, 2 layers, 2 kv heads of 16, fp32
    engine.stop_token_ids = torch.tensor([-1])
    prompt_ids, rollout = rollout_for(engine, rows=4)
    for _ in range(3):
        rollout.step()
    # olmo2's layers are all full attention: the prompt is held once, each row holds its 3 tokens fed
    layers = rollout.cache.cache.layers
    assert all(type(layer).__name__ == "SharedPromptLayer" for layer in layers)
    held = (len(prompt_ids) + 4 * 3) * fwd.footprint.kv_bytes_per_token
    assert rollout.cache.allocated_bytes == held
    in_flight = 4 * (len(prompt_ids) + 3) * fwd.footprint.kv_bytes_per_token // 2  # one layer's keys and values
    assert rollout.cache.peak_bytes == held + in_flight
    assert fwd.footprint.extra_cache_bytes(len(prompt_ids), 4) == 4 * len(prompt_ids) * fwd.footprint.kv_bytes_per_token // 2
    assert decoding.decode_chunk_rows(engine.forward, engine.decode_chunk_bytes, 100) >= 2**40  # no row chunks: the model's cache is one batch
    assert fwd.kind == "hf" and fwd.chunked_decode is False
    # the prompt state is the model's own cache object of the prompt, held by the rows' cache as it is
    from specrej.engine.hf_forward import HFPromptCache

    prompt = decoding.prefill(engine.forward, prompt_ids)
    assert isinstance(prompt.state, HFPromptCache) and prompt.state.prompt_len == len(prompt_ids)
    cache = engine.forward.new_cache()
    cache.share_prompt(prompt.state)
    assert cache.prompt is prompt.state.cache and cache.prompt_len == len(prompt_ids)
    # gemma2's sliding layer keeps each row's copy of the prompt's part (at most window - 1 = 7 tokens)
    gemma = load_engine(str(tiny_model_dir("gemma2")))
    assert gemma.forward.layer_shares_prompt == [False, True]
    assert gemma.forward.footprint.extra_cache_bytes(12, 4) == 4 * 12 * (gemma.kv_bytes_per_token // 2) * 2


# -- the engine's own forward pass on Mistral, Qwen2, Qwen3 and Gemma 3 ------------------------

@pytest.mark.parametrize("model_type", FAST)
def test_fast_path_on_mistral_and_qwen2_matches_hf_and_prunes_exactly(tiny_model_dir, model_type):
    engine = load_engine(str(tiny_model_dir(model_type)))
    assert engine.forward_kind == "llama" and engine.config.model_type == model_type
    engine.stop_token_ids = torch.tensor([-1])
    prompt_ids, rollout = rollout_for(engine, rows=6)
    assert_matches_hf(engine, prompt_ids, rollout)
    for _ in range(6):
        rollout.step()
    assert_matches_hf(engine, prompt_ids, rollout)
    rollout.halt(rollout.candidate_ids[[1, 2, 5]].tolist())
    assert_matches_hf(engine, prompt_ids, rollout)
    for _ in range(3):
        rollout.step()
    assert_matches_hf(engine, prompt_ids, rollout)
    result = best_of_n(engine, LogProbReward(), PROMPT, n=2, memory_budget=2**26,
                       sampling=SamplingParams(max_new_tokens=4))
    assert result.params["forward"] == "llama"


@pytest.mark.parametrize("model_type", ["llama", *FAST])
def test_fast_path_in_bfloat16_is_close_to_hf_bfloat16(tiny_model_dir, generator_dir, model_type):
    path = generator_dir if model_type == "llama" else tiny_model_dir(model_type)
    engine = load_engine(str(path), dtype="bfloat16")
    assert engine.dtype == torch.bfloat16 and engine.forward_kind == "llama"
    engine.stop_token_ids = torch.tensor([-1])
    prompt_ids, rollout = rollout_for(engine, rows=4)
    for _ in range(8):
        rollout.step()
    tokens = live_tokens(rollout)
    ref = reference_logits(engine.model, prompt_ids, tokens)[:, -1]
    ours = engine.forward.logits(rollout.hidden)
    torch.testing.assert_close(ours, ref, atol=BF16_ATOL, rtol=BF16_RTOL)
    rollout.halt(rollout.candidate_ids[[0, 2]].tolist())
    for _ in range(2):
        rollout.step()
    ref = reference_logits(engine.model, prompt_ids, live_tokens(rollout))[:, -1]
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), ref, atol=BF16_ATOL, rtol=BF16_RTOL)


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_neox"])
def test_fallback_in_bfloat16_is_close_to_hf_bfloat16(tiny_model_dir, model_type):
    engine = load_engine(str(tiny_model_dir(model_type)), dtype="bfloat16")
    assert engine.dtype == torch.bfloat16 and engine.forward_kind == "hf"
    engine.stop_token_ids = torch.tensor([-1])
    prompt_ids, rollout = rollout_for(engine, rows=4)
    for _ in range(10):
        rollout.step()
    ref = reference_logits(engine.model, prompt_ids, live_tokens(rollout))[:, -1]
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), ref, atol=BF16_ATOL, rtol=BF16_RTOL)


def test_the_fallback_implements_the_forward_pass_interface(tiny_model_dir):
    from specrej.engine.decoding import ForwardPass, RowCache

    engine = load_engine(str(tiny_model_dir("gpt2")))
    for protocol, obj in ((ForwardPass, engine.forward), (RowCache, engine.forward.new_cache())):
        members = set(protocol.__annotations__) | {
            name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}
        members |= {name for name, value in vars(protocol).items() if isinstance(value, property)}
        assert not [name for name in members if not hasattr(obj, name)]


def test_a_head_the_fallback_cannot_reproduce_is_refused(tiny_model_dir):
    """A causal LM that changes the decoder's output before its head would decode wrong through
    the decoder alone: the first prompt's check refuses it instead."""
    from specrej import SpecrejError

    engine = load_engine(str(tiny_model_dir("gpt2")))
    engine.forward.head.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    with pytest.raises(SpecrejError, match="gpt2"):
        decoding.prefill(engine.forward, engine.encode_prompt(PROMPT))
