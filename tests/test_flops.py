"""specrej.records.flops: FLOP counts from a model's shape, checked against values worked out by hand."""

import json
import subprocess
import sys

import pytest

from specrej.records.flops import (
    ModelShape,
    attention_flops,
    candidate_generation_flops,
    causal_attention_flops,
    generation_flops,
    layer_flops_per_token,
    lm_head_flops,
    matmul_flops_per_token,
    non_embedding_params,
    prefill_flops,
    record_flops,
    reward_model_flops,
    scoring_calls,
)

# The tiny model: 2 layers, hidden 4, intermediate 8, 2 heads, 1 kv head, head_dim 2, vocab 10.
TINY = ModelShape(num_layers=2, hidden_size=4, intermediate_size=8, num_attention_heads=2, num_kv_heads=1,
                  head_dim=2, vocab_size=10, tie_word_embeddings=False)
# Per layer, weights [in x out]:
#   q 4 x (2*2) = 16, k 4 x (1*2) = 8, v 4 x 2 = 8, o (2*2) x 4 = 16       -> attention 48
#   gate 4 x 8 = 32, up 4 x 8 = 32, down 8 x 4 = 32                        -> MLP 96
#   per layer 144; 2 layers: 288 weights -> 2 * 288 = 576 FLOPs per token through the layers
#   lm_head 4 x 10 = 40 weights -> 80 FLOPs per position
#   per generated token: 576 + 80 = 656
# Attention per attended position: 2 products (q.k, p.v) x 2 FLOPs x 2 layers x 2 heads x 2 head_dim = 32.
LAYERS = 576
HEAD = 80
PER_POSITION = 32


def test_tiny_per_token_counts():
    assert non_embedding_params(TINY) == 288
    assert layer_flops_per_token(TINY) == LAYERS
    assert lm_head_flops(TINY) == HEAD
    assert matmul_flops_per_token(TINY) == 656


def test_tiny_attention():
    # one token attending to 5 positions: 32 * 5
    assert attention_flops(TINY, 5) == 160
    assert attention_flops(TINY, 0) == 0
    # a causal pass over 3 positions attends 1 + 2 + 3 = 6 positions: 32 * 6
    assert causal_attention_flops(TINY, 3) == 192


def test_tiny_prefill_of_three_tokens():
    # 3 positions through the layers: 3 * 576 = 1728; causal attention 192; the head once: 80
    assert prefill_flops(TINY, 3) == 1728 + 192 + 80 == 2000
    assert prefill_flops(TINY, 3, logits_positions=0) == 1920  # this engine's fast path
    assert prefill_flops(TINY, 3, logits_positions=3) == 1920 + 3 * 80  # logits at every position


def test_tiny_generation_of_two_tokens_after_a_three_token_prompt():
    # token 0: head + layers = 656, attends to 3 + 0 + 1 = 4 positions: 128
    # token 1: 656, attends to 3 + 1 + 1 = 5 positions: 160
    # 2 * 656 + 128 + 160 = 1312 + 288 = 1600
    assert generation_flops(TINY, 3, 2) == 1600
    assert generation_flops(TINY, 3, 0) == 0
    # closed form agrees with the sum it stands for, over a range of lengths
    for p in (1, 3, 17):
        for n in (1, 2, 9, 40):
            direct = sum(matmul_flops_per_token(TINY) + attention_flops(TINY, p + j + 1) for j in range(n))
            assert generation_flops(TINY, p, n) == direct


def test_tiny_reward_model():
    # T positions: T * 576 through the layers, causal attention 32 * T (T + 1) / 2, score head 2 * 4 * 1 = 8
    # T = 5: 2880 + 32 * 15 = 480 -> 3368;  T = 7: 4032 + 32 * 28 = 896 -> 4936
    assert reward_model_flops(TINY, 5) == 3368
    assert reward_model_flops(TINY, 7) == 4936


def test_candidate_generation_flops_follows_how_each_row_ended():
    # halted after 2 tokens: both sampled (2 heads) and both fed (2 passes, attending 4 and 5)
    assert candidate_generation_flops(TINY, 3, {"num_tokens": 2, "finished": False, "complete": False}) == 1600
    # stop token after 2 tokens: 3 heads (the stop token too), 2 passes attending 4, 5:
    # 3 * 80 + 2 * 576 + 32 * 9 = 240 + 1152 + 288 = 1680
    assert candidate_generation_flops(TINY, 3, {"num_tokens": 2, "finished": True, "complete": True}) == 1680
    # max_new_tokens = 4 reached: 4 heads, 3 passes attending 4, 5, 6 (the last token is never fed):
    # 4 * 80 + 3 * 576 + 32 * 15 = 320 + 1728 + 480 = 2528
    assert candidate_generation_flops(TINY, 3, {"num_tokens": 4, "finished": False, "complete": True}) == 2528


def sr_record(**overrides):
    """Prompt of 3 tokens; SR with one round at decision token 2. Candidate 0 was live at round
    0 (2 tokens) and halted there; candidate 1 was live at round 0, kept, sampled tokens 3 and 4
    and then a stop token: complete with 4 tokens."""
    record = {
        "prompt_id": 0, "method": "sr", "params": {"alpha": 0.5, "forward": "llama"},
        "candidates": [
            {"id": 0, "num_tokens": 2, "finished": False, "complete": False, "halted_round": 0,
             "round_scores": [-1.0], "final_score": None},
            {"id": 1, "num_tokens": 4, "finished": True, "complete": True, "halted_round": None,
             "round_scores": [-0.5], "final_score": -0.4},
        ],
        "rounds": [{"decision_token": 2, "batch_before": 2, "batch_after": 1}],
        # generated: 2 + (4 + the stop token) = 7; scored: round 0 both at 2 tokens, then 1 at 4: 8
        "tokens": {"generated": 7, "scored": 8},
    }
    record.update(overrides)
    return record


def test_record_flops_of_a_tiny_sr_record():
    # prefill (fast path, no logits): 3 * 576 + 192 = 1920
    # generate: candidate 0 halted at 2 tokens: 1600 (as generation_flops(3, 2) above)
    #           candidate 1: 5 heads = 400, 4 passes = 2304, attending 4 + 5 + 6 + 7 = 22 positions = 704
    #           -> 3408;  total 1600 + 3408 = 5008
    # reward (the tiny shape as a reward model, its prompt 3 tokens):
    #   round 0: candidate 0 at 2 tokens (T = 5) 3368, candidate 1 at 2 tokens (T = 5) 3368
    #   candidate 1 complete, at 4 tokens (T = 7): 4936         -> 11672
    # total 1920 + 5008 + 11672 = 18600
    record = sr_record()
    assert scoring_calls(record) == [2, 2, 4]
    assert record_flops(record, TINY, TINY, 3) == {"prefill": 1920, "generate": 5008, "reward": 11672,
                                                    "total": 18600}
    # the log-prob reward has no model: no reward FLOPs
    assert record_flops(record, TINY, None, 3) == {"prefill": 1920, "generate": 5008, "reward": 0, "total": 6928}
    # the Hugging Face path's prefill also runs the head once (logits_to_keep=1): + 80
    hf = sr_record(params={"forward": "hf"})
    assert record_flops(hf, TINY, None, 3)["prefill"] == 2000
    # the reward model's own prompt length when known: 4 tokens -> T = 6, 6, 8
    # 6: 3456 + 32 * 21 = 672 + 8 -> 4136;  8: 4608 + 32 * 36 = 1152 + 8 -> 5768;  4136 * 2 + 5768 = 14040
    assert record_flops(record, TINY, TINY, 3, reward_prompt_len=4)["reward"] == 14040


def test_a_response_completed_before_the_round_is_scored_once_at_its_final_length():
    # candidate 2 sampled 1 token and then a stop token at step 2: complete with 1 token before
    # round 0 (decision token 2), where its final score was its round score (not a second call)
    record = sr_record()
    record["candidates"].append({"id": 2, "num_tokens": 1, "finished": True, "complete": True,
                                 "halted_round": None, "round_scores": [-2.0], "final_score": -2.0})
    record["tokens"] = {"generated": 7 + 2, "scored": 8 + 1}
    assert scoring_calls(record) == [2, 2, 4, 1]
    # candidate 2 generate: 2 heads 160 + 1 pass 576 + attending 4 positions 128 = 864
    # reward: T = 3 + 1 = 4: 2304 + 32 * 10 = 320 + 8 -> 2632
    assert record_flops(record, TINY, TINY, 3) == {"prefill": 1920, "generate": 5008 + 864,
                                                    "reward": 11672 + 2632, "total": 18600 + 864 + 2632}


def test_record_flops_of_a_tiny_best_of_n_record():
    # Best-of-N in two batches of one: the prompt is still prefilled once (shared): 1920.
    # candidate 0 stopped after 2 tokens: 1680; candidate 1 reached max_new_tokens = 4: 2528 -> 4208
    # reward: each once at its final length: T = 5 -> 3368, T = 7 -> 4936 -> 8304
    record = {"method": "bon", "params": {"n": 2, "batch_size": 1},
              "candidates": [{"id": 0, "num_tokens": 2, "finished": True, "complete": True, "round_scores": []},
                             {"id": 1, "num_tokens": 4, "finished": False, "complete": True, "round_scores": []}],
              "rounds": [], "tokens": {"generated": 3 + 4, "scored": 6}}
    assert record_flops(record, TINY, TINY, 3) == {"prefill": 1920, "generate": 4208, "reward": 8304,
                                                    "total": 1920 + 4208 + 8304}


def test_a_record_that_lacks_a_field_or_disagrees_with_its_counters_is_refused():
    record = sr_record()
    del record["candidates"][0]["num_tokens"]
    with pytest.raises(ValueError, match="num_tokens"):
        record_flops(record, TINY, None, 3)
    record = sr_record()
    del record["rounds"][0]["decision_token"]
    with pytest.raises(ValueError, match="decision_token"):
        record_flops(record, TINY, None, 3)
    with pytest.raises(ValueError, match="candidates"):
        record_flops({"prompt_id": 0, "error": "out of memory"}, TINY, None, 3)
    with pytest.raises(ValueError, match="tokens.generated"):
        record_flops(sr_record(tokens={"generated": 6, "scored": 8}), TINY, None, 3)
    with pytest.raises(ValueError, match="tokens.scored"):
        record_flops(sr_record(tokens={"generated": 7, "scored": 9}), TINY, None, 3)
    with pytest.raises(ValueError, match="rounds"):
        record_flops(sr_record(rounds=[]), TINY, None, 3)
    with pytest.raises(ValueError, match="params.forward"):
        record_flops(sr_record(params={"forward": "vllm"}), TINY, None, 3)
    # without the counters the derivation still runs
    assert record_flops(sr_record(tokens={}), TINY, TINY, 3)["total"] == 18600


def test_shape_round_trips_through_a_json_record():
    data = json.loads(json.dumps(TINY.to_dict()))
    assert ModelShape.from_dict(data) == TINY
    with pytest.raises(ValueError, match="num_layers"):
        ModelShape.from_dict({k: v for k, v in data.items() if k != "num_layers"})
    with pytest.raises(ValueError, match="bogus"):
        ModelShape.from_dict({**data, "bogus": 1})
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelShape(**{**data, "num_kv_heads": 0})


def test_from_config_reads_llama_and_qwen2_configs():
    from transformers import LlamaConfig, Qwen2Config

    llama = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                        num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True)
    assert ModelShape.from_config(llama) == ModelShape(3, 64, 160, 8, 2, 8, 1000, True)
    qwen = Qwen2Config(vocab_size=500, hidden_size=96, intermediate_size=256, num_hidden_layers=4,
                       num_attention_heads=6, num_key_value_heads=3, tie_word_embeddings=False)
    assert ModelShape.from_config(qwen) == ModelShape(4, 96, 256, 6, 3, 16, 500, False)  # head_dim 96 / 6
    # a config.json dict, no kv heads given: every head has its own k/v; Gemma-style head_dim
    gemma_like = {"num_hidden_layers": 2, "hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 4,
                  "head_dim": 32, "vocab_size": 100}
    shape = ModelShape.from_config(gemma_like)
    assert (shape.num_kv_heads, shape.head_dim, shape.tie_word_embeddings) == (4, 32, True)
    # q 48 x 128, k and v 48 x 128 each, o 128 x 48, MLP 3 x 48 x 96: 4 * 6144 + 13824 = 38400 per layer
    assert non_embedding_params(shape) == 2 * 38400
    with pytest.raises(ValueError, match="vocab_size"):
        ModelShape.from_config({k: v for k, v in gemma_like.items() if k != "vocab_size"})
    with pytest.raises(ValueError, match="experts"):
        ModelShape.from_config({**gemma_like, "num_local_experts": 8})


def test_smollm2_135m_sanity():
    smollm2 = ModelShape(num_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                         num_kv_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True)
    # per layer: q 576*576 = 331776, k 576*192 = 110592, v 110592, o 331776   -> 884736
    #            gate, up, down 3 * 576 * 1536 = 2654208                       -> 3538944 per layer
    # 30 layers: 106168320 (~106.2M non-embedding weights)
    # lm_head 576 * 49152 = 28311552 -> 134479872 weights used per generated token
    # -> 2 * 134479872 = 268959744 FLOPs per token before attention
    assert non_embedding_params(smollm2) == 106_168_320
    assert matmul_flops_per_token(smollm2) == 268_959_744
    # attention: 4 * 30 * 9 * 64 = 69120 per attended position
    assert attention_flops(smollm2, 1) == 69_120


def test_imports_without_torch():
    code = "import sys, specrej.records.flops; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------
# the session's count, made as the work happens, against the record formula (`record_flops`)
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, params", [
    ("bon", {"n": 6, "batch_size": 4}),
    ("sr", {"alpha": 0.5, "batch_size": 12, "min_tokens": 4, "decision_tokens": [3, 7]}),
    ("sr-random", {"alpha": 0.7, "batch_size": 12, "min_tokens": 4}),
    ("st-bon", {"n": 6}),
])
def test_the_sessions_flop_count_equals_the_record_formula(engine, reward_model_dir, method, params):
    from specrej import SamplingParams, load_reward
    from specrej.api import run_one

    reward = load_reward(str(reward_model_dir), device="cpu", dtype="float32")
    result = run_one(engine, reward, "Write a poem about the sea.", method=method, seed=2,
                     sampling=SamplingParams(max_new_tokens=12), memory_budget=engine.kv_bytes_per_token * 160, **params)
    record = result.to_record("p")
    generator, reward_shape = ModelShape.from_config(engine.config), ModelShape.from_config(reward.model.config)
    prompt_len = len(engine.encode_prompt("Write a poem about the sea."))
    assert record["flops"] == record_flops(record, generator, reward_shape, prompt_len)
    assert record["flops"]["reward"] > 0 and record["flops"]["generate"] > 0
    assert record["rounds"] or method == "bon"  # SR's budget forces cuts; ST-BoN votes once
