"""The engine's own forward pass, cache and sampler against Hugging Face's reference."""

import pytest
import torch

from specrej import SamplingParams
from specrej.engine import decoding, sampler
from specrej.engine.cache import compaction_order
from specrej.engine.sampler import sample_next
from specrej.engine.engine import Engine

ATOL = 1e-4


def reference_logits(engine, prompt_ids, rows_tokens):
    """Next-token logits from a fresh HF forward over prompt + each row's tokens (no cache)."""
    ids = torch.tensor([prompt_ids + row for row in rows_tokens])
    with torch.no_grad():
        return engine.model(ids).logits[:, -1].float()


def new_rollout(engine, rows, max_len=32, seed=0, **sampling):
    prompt_ids = engine.encode_prompt("Write a poem about the sea.")
    prompt = decoding.prefill(engine.forward, prompt_ids)
    params = SamplingParams(max_new_tokens=sampling.pop("max_new_tokens", 32), **sampling)
    return prompt_ids, engine.rollout(prompt, rows, max_len, params, torch.Generator().manual_seed(seed))


def live_tokens(rollout):
    return rollout.tokens[:, : rollout.length].tolist()


def test_prefill_matches_hf(engine):
    prompt_ids = engine.encode_prompt("Explain gravity to a child.")
    torch.testing.assert_close(engine.forward.logits(decoding.prefill(engine.forward, prompt_ids).hidden), reference_logits(engine, prompt_ids, [[]])[0],
                               atol=ATOL, rtol=0)


def test_decode_matches_hf_and_prune_keeps_survivors_exact(generator_dir):
    from specrej import load_engine

    engine = load_engine(str(generator_dir))
    engine.stop_token_ids = torch.tensor([-1])  # no row finishes: the test controls pruning
    prompt_ids, rollout = new_rollout(engine, rows=6)
    for _ in range(5):
        rollout.step()
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), reference_logits(engine, prompt_ids, live_tokens(rollout)),
                               atol=ATOL, rtol=0)
    halted_ids = rollout.candidate_ids[[0, 3, 4]].tolist()
    halted = rollout.halt(halted_ids)
    assert sorted(h.candidate_id for h in halted) == sorted(halted_ids)
    assert rollout.num_rows == 3 and not set(rollout.candidate_ids.tolist()) & set(halted_ids)
    # after prune, the survivors' logits equal a fresh computation on their prefixes...
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), reference_logits(engine, prompt_ids, live_tokens(rollout)),
                               atol=ATOL, rtol=0)
    # ...and so do the next tokens, decoded from the compacted cache and after a re-layout
    rollout.step()
    rollout.relayout(48)
    for _ in range(3):
        rollout.step()
    assert rollout.cache.max_len == 48
    torch.testing.assert_close(engine.forward.logits(rollout.hidden), reference_logits(engine, prompt_ids, live_tokens(rollout)),
                               atol=ATOL, rtol=0)


def test_finished_rows_are_compacted_out(generator_dir):
    from specrej import load_engine

    engine = load_engine(str(generator_dir))
    # make two frequent tokens stop tokens, so rows finish at different steps
    frequent = reference_logits(engine, engine.encode_prompt("Write a poem about the sea."), [[]])[0].topk(2).indices
    engine.stop_token_ids = torch.cat([engine.stop_token_ids, frequent])
    prompt_ids, rollout = new_rollout(engine, rows=8, max_new_tokens=32)
    finished = []
    while rollout.num_rows:
        finished += rollout.step()
        assert rollout.cache.rows == rollout.num_rows
        if rollout.num_rows:
            torch.testing.assert_close(engine.forward.logits(rollout.hidden), reference_logits(engine, prompt_ids, live_tokens(rollout)),
                                       atol=ATOL, rtol=0)
    assert sorted(f.candidate_id for f in finished) == list(range(8))
    stopped = [f for f in finished if f.stopped]
    assert stopped, "expected some rows to end with a stop token"
    assert all(len(f.token_ids) < 32 for f in stopped)
    assert all(len(f.token_ids) == len(f.token_logprobs) for f in finished)


def test_same_seed_same_tokens_and_other_seed_differs(engine):
    runs = []
    for seed in (7, 7, 8):
        _, rollout = new_rollout(engine, rows=4, seed=seed)
        for _ in range(6):
            rollout.step()
        runs.append(rollout.tokens[:, :6].clone())
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_sampler_top_k_one_and_tiny_top_p_are_greedy():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    greedy = logits.argmax(-1)
    assert torch.equal(sample_next(logits, SamplingParams(temperature=0), gen), greedy)
    assert torch.equal(sample_next(logits, SamplingParams(top_k=1), gen), greedy)
    assert torch.equal(sample_next(logits, SamplingParams(top_p=1e-6), gen), greedy)


def test_sampler_follows_the_distribution_and_respects_top_k():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20000, -1)
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(sample_next(logits, SamplingParams(), gen), minlength=4) / 20000
    torch.testing.assert_close(counts, probs, atol=0.015, rtol=0)
    top2 = torch.bincount(sample_next(logits, SamplingParams(top_k=2), gen), minlength=4) / 20000
    torch.testing.assert_close(top2, torch.tensor([0.625, 0.375, 0, 0]), atol=0.015, rtol=0)
    nucleus = torch.bincount(sample_next(logits, SamplingParams(top_p=0.7), gen), minlength=4) / 20000
    torch.testing.assert_close(nucleus, torch.tensor([0.625, 0.375, 0, 0]), atol=0.015, rtol=0)


def test_compaction_order_moves_only_tail_survivors_into_holes():
    keep = torch.tensor([True, False, True, True, False, True])
    assert compaction_order(keep).tolist() == [0, 5, 2, 3]


def test_an_architecture_the_engine_does_not_know_runs_through_the_fallback():
    """GPT-2 is not one of the fast path's; it goes through its own forward (tests/test_hf_forward.py)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from specrej.engine.hf_forward import HFForward

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    engine = Engine(model, tokenizer=None)
    assert isinstance(engine.forward, HFForward) and engine.forward_kind == "hf"


def test_the_engine_knows_its_own_architectures(engine):
    assert engine.forward_kind == "llama" and engine.forward.__class__.__name__ == "LlamaForward"


def test_sampling_in_row_chunks_changes_nothing(generator_dir):
    from specrej import load_engine

    engine = load_engine(str(generator_dir))
    runs = []
    for chunk_rows in (engine.sample_chunk_rows, 3):
        engine.sample_chunk_rows = chunk_rows
        _, rollout = new_rollout(engine, rows=8, seed=5)
        for _ in range(6):
            rollout.step()
        runs.append((rollout.tokens[:, :6].clone(), rollout.logprobs[:, :6].clone()))
    assert torch.equal(runs[0][0], runs[1][0])
    torch.testing.assert_close(runs[0][1], runs[1][1])


def test_decoding_in_row_chunks_matches_one_chunk(generator_dir):
    """A decode step may feed the rows in chunks (bounded activations); the tokens do not change."""
    from specrej import load_engine

    engine = load_engine(str(generator_dir))
    runs = []
    for chunk_bytes in (engine.decode_chunk_bytes, 3 * engine.forward.footprint.decode_row_bytes(64)):
        engine.decode_chunk_bytes = chunk_bytes
        prompt_ids, rollout = new_rollout(engine, rows=8, seed=5)
        for _ in range(6):
            rollout.step()
        runs.append((rollout.tokens[:, :6].clone(), rollout.logprobs[:, :6].clone()))
        torch.testing.assert_close(engine.forward.logits(rollout.hidden),
                                   reference_logits(engine, prompt_ids, live_tokens(rollout)), atol=ATOL, rtol=0)
    assert 3 <= decoding.decode_chunk_rows(engine.forward, engine.decode_chunk_bytes, len(prompt_ids) + 1) < 8  # the second run went in several chunks
    assert torch.equal(runs[0][0], runs[1][0])
    torch.testing.assert_close(runs[0][1], runs[1][1])


def test_the_free_functions_are_what_the_engine_runs(engine):
    from specrej.engine import decoding

    prompt_ids = engine.encode_prompt("Explain gravity to a child.")
    ours = decoding.prefill(engine.forward, prompt_ids)
    assert torch.equal(ours.hidden, decoding.prefill(engine.forward, prompt_ids).hidden)
    assert all(torch.equal(a, b) for a, b in zip(ours.state.k, decoding.prefill(engine.forward, prompt_ids).state.k))


def test_the_llama_forward_implements_the_forward_pass_interface(engine):
    """What a fallback forward pass must provide: every member of decoding.ForwardPass."""
    from specrej.engine.decoding import ForwardPass

    from specrej.engine.budget import Footprint

    def members(protocol):
        return set(protocol.__annotations__) | {
            name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}

    step, footprint = members(ForwardPass), members(Footprint)
    assert {"forward_prompt", "forward_step", "logits", "new_cache", "kind", "chunked_decode", "footprint"} <= step
    assert footprint == {"kv_bytes_per_token", "decode_row_bytes", "prefill_bytes", "extra_cache_bytes"}
    assert len(step) <= 14 and not step & footprint  # the step and the bytes, apart
    assert not [name for name in step if not hasattr(engine.forward, name)]
    assert not [name for name in footprint if not hasattr(engine.forward.footprint, name)]
    assert engine.forward.kind == "llama" and engine.forward.chunked_decode is True
    assert engine.forward.footprint.extra_cache_bytes(40, 1000) == 0  # a KVCache holds what the budget counts


def test_the_prompt_state_is_the_forward_pass_own(engine):
    """forward_prompt's PromptState is what its own RowCache.share_prompt takes: the llama path's
    per-layer k and v (cache.PromptKV), attached as they are (no copy)."""
    from specrej.engine.cache import PromptKV

    prompt = decoding.prefill(engine.forward, engine.encode_prompt("Explain gravity to a child."))
    assert isinstance(prompt.state, PromptKV) and prompt.state.prompt_len == len(prompt.token_ids)
    assert len(prompt.state.k) == len(prompt.state.v) == len(engine.layers)
    cache = engine.forward.new_cache()
    cache.share_prompt(prompt.state)
    assert cache.prompt_k is prompt.state.k and cache.prompt_len == len(prompt.token_ids)


def test_decoding_knows_nothing_of_the_engine():
    """decoding.py imports neither engine.py nor anything that does (no cycle, not even for types)."""
    import ast
    from pathlib import Path

    from specrej.engine import decoding

    tree = ast.parse(Path(decoding.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    # records.step_profile: the torch-free format of the steps a rollout records (it imports no engine module)
    assert imported <= {"__future__", "collections.abc", "dataclasses", "typing", "torch", "budget", "cache", "errors",
                        "sampler", "sampling", "records.step_profile"}


def test_a_rollout_needs_only_the_forward_pass_and_runs_the_free_functions(generator_dir, monkeypatch):
    """Rollout over the bare forward pass (no engine) with explicit stop tokens and chunk sizes gives
    what Engine.rollout gives, and its steps are
    sampler.sample / decoding.decode_one_token (patching the free function reaches it)."""
    from specrej import load_engine
    from specrej.engine import decoding
    from specrej.engine.decoding import Rollout

    engine = load_engine(str(generator_dir))
    frequent = reference_logits(engine, engine.encode_prompt("Write a poem about the sea."), [[]])[0].topk(2).indices
    engine.stop_token_ids = torch.cat([engine.stop_token_ids, frequent])  # rows finish at different steps
    prompt = decoding.prefill(engine.forward, engine.encode_prompt("Write a poem about the sea."))
    params = SamplingParams(max_new_tokens=12, top_p=0.9)
    calls = []
    decode = decoding.decode_one_token

    def counted(model, cache, tokens, pos, chunk_rows, layer_states=None):
        calls.append(tokens.shape[0])
        return decode(model, cache, tokens, pos, chunk_rows, layer_states)

    runs, steps = [], []
    for make in (lambda: Rollout(engine.forward, prompt, 6, 12, params, torch.Generator().manual_seed(3),
                                 stop_token_ids=engine.stop_token_ids, sample_chunk_rows=4,
                                 decode_chunk_bytes=engine.decode_chunk_bytes),
                 lambda: engine.rollout(prompt, 6, 12, params, torch.Generator().manual_seed(3))):
        with monkeypatch.context() as patch:
            patch.setattr(decoding, "decode_one_token", counted)
            rollout, finished, calls[:] = make(), [], []
            while rollout.num_rows:
                finished += rollout.step()
        runs.append(sorted((f.candidate_id, f.token_ids, f.token_logprobs, f.stopped) for f in finished))
        steps.append(list(calls))
    # the same tokens and stops; log-probs to float32 rounding (seen once on a loaded machine: the
    # last bit of one log-prob differed, as a BLAS that sizes its thread team by load may round)
    assert [(i, ids, stopped) for i, ids, _, stopped in runs[0]] == [(i, ids, stopped) for i, ids, _, stopped in runs[1]]
    for (*_, first, _), (*_, second, _) in zip(runs[0], runs[1]):
        assert first == pytest.approx(second, rel=1e-6, abs=1e-6)
    assert any(stopped for *_, stopped in runs[0])
    assert steps[0] and steps[0] == steps[1]  # every step went through decoding.decode_one_token
    with pytest.raises(TypeError, match="stop_token_ids"):
        Rollout(engine.forward, prompt, 2, 4, params, torch.Generator())


def test_detokenize_skips_special_tokens(engine):
    ids = [engine.encode_prompt("List three fruits."), []]
    assert engine.detokenize(ids) == engine.tokenizer.batch_decode(ids, skip_special_tokens=True)


def test_decode_rollout_stops_at_a_decision_token_and_when_the_capacity_is_reached(engine):
    from specrej.engine.budget import TokenBudget
    from specrej.engine.decoding import decode_rollout

    engine.stop_token_ids, stop_ids = torch.tensor([-1]), engine.stop_token_ids  # no row finishes early
    try:
        _, rollout = new_rollout(engine, rows=4, max_len=4, max_new_tokens=10)
        assert decode_rollout(rollout, TokenBudget(4 * 10), stop_at={3}) == []
        assert rollout.length == 3 and rollout.cache.max_len == 4
        assert decode_rollout(rollout, TokenBudget(4 * 6)) == []  # full at 4 tokens: re-laid out to 6 each, then stops
        assert rollout.length == 6 and rollout.cache.max_len == 6 and rollout.num_rows == 4
        finished = decode_rollout(rollout, TokenBudget(4 * 10))
        assert rollout.num_rows == 0 and sorted(f.candidate_id for f in finished) == [0, 1, 2, 3]
        assert all(len(f.token_ids) == 10 and not f.stopped for f in finished)
    finally:
        engine.stop_token_ids = stop_ids


def test_top_logprobs_are_kept_only_when_asked_and_change_no_token(engine, monkeypatch):
    """A rollout asked for top-k log-probs gives, after each step, the k largest log-probs of the
    untempered distribution each row sampled from (checked against log_softmax of the same logits);
    the tokens are those of a rollout that was not asked; and one not asked never computes them."""
    prompt_ids = engine.encode_prompt("Write a poem about the sea.")
    prompt = decoding.prefill(engine.forward, prompt_ids)
    params = SamplingParams(max_new_tokens=6, temperature=0.7)

    def rollout(k):
        return engine.rollout(prompt, 5, 6, params, torch.Generator().manual_seed(4), top_k_logprobs=k)

    asked, plain = rollout(3), rollout(0)
    for _ in range(4):
        hidden, ids = asked.hidden.clone(), asked.candidate_ids.clone()
        asked.step()
        expected = torch.log_softmax(engine.forward.logits(hidden), -1).topk(3, dim=-1).values
        assert torch.allclose(asked.top_logprobs, expected, atol=1e-5)
        assert torch.equal(asked.sampled_ids, ids)  # the rows as they sampled, before any left
    monkeypatch.setattr(sampler, "top_logprobs", lambda *args: pytest.fail("computed without being asked"))
    for _ in range(4):
        plain.step()
    assert plain.top_logprobs is None and live_tokens(plain) == live_tokens(asked)
