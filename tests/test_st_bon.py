"""ST-BoN's pure functions (truncation point, window, CoE features, scores, votes) on hand-worked inputs."""

import math

import pytest
import torch

from specrej.engine import decoding
from specrej.methods.st_bon import (
    coe_features,
    consistency_scores,
    prefixes_distinct,
    truncation_point,
    vote,
    window,
    winner,
)

# Rows agree at step 1 (all 5), rows 0 and 1 still agree at step 2 ((5,1) twice), all differ at step 3.
TOKENS = torch.tensor([[5, 1, 7, 9],
                       [5, 1, 8, 9],
                       [5, 2, 8, 9]])


def test_truncation_point_at_distinctness_or_a_stop_token():
    assert not prefixes_distinct(TOKENS[:, :2]) and prefixes_distinct(TOKENS[:, :3])
    assert truncation_point(TOKENS, stop_token_ids=[0]) == 3
    assert truncation_point(TOKENS, stop_token_ids=[]) == 3
    # row 2's 2nd token is 2: a stop there ends it at c = 2, before the rows are distinct
    assert truncation_point(TOKENS, stop_token_ids={2, 99}) == 2
    # a stop token only counts as the t-th token: 9 is 4th everywhere, after distinctness at 3
    assert truncation_point(TOKENS, stop_token_ids=[9]) == 3


def test_truncation_point_never_and_single_row():
    assert truncation_point(torch.full((2, 3), 4), stop_token_ids=[0]) is None
    assert prefixes_distinct(torch.tensor([[3, 3]]))
    assert truncation_point(torch.tensor([[3, 3]]), stop_token_ids=[]) == 1


def test_window():
    assert window(3, 1.0) == (3, 6)
    assert window(1, 0.5) == (1, 2)  # int(0.5) = 0, raised to 1
    assert window(7, 0.5) == (3, 10)  # int(3.5) = 3


# [L=3, N=3, H=2]: LAYERS[l][n] is h_l of row n.
LAYERS = torch.tensor([
    [[1.0, 0.0], [2.0, 0.0], [1.0, 0.0]],
    [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0]],
    [[0.0, 1.0], [1.0, 1.0], [1.0, 1.0]],
])
R2 = math.sqrt(2.0)
# Row 0: (1,0) -> (1,1) -> (0,1). Steps of norm 1, 1; ||h0 - h2|| = sqrt2: M = 1/sqrt2, 1/sqrt2.
#        Angles pi/4, pi/4; angle(h0, h2) = pi/2: A = 1/2, 1/2.  F = 1/sqrt2 - 1/2
# Row 1: (2,0) -> (0,1) -> (1,1). Steps ||(2,-1)|| = sqrt5, ||(-1,0)|| = 1; ||(1,-1)|| = sqrt2:
#        M = sqrt(5/2), 1/sqrt2. Angles pi/2, pi/4; angle(h0, h2) = pi/4: A = 2, 1.
#        F = (sqrt(5/2) - 2 + 1/sqrt2 - 1) / 2
# Row 2: (1,0) -> (0,1) -> (1,1). Steps sqrt2, 1; ||(0,-1)|| = 1: M = sqrt2, 1.
#        Angles pi/2, pi/4; angle(h0, h2) = pi/4: A = 2, 1.  F = (sqrt2 - 2 + 0) / 2 = 1/sqrt2 - 1
FEATURES = [1 / R2 - 0.5, (math.sqrt(2.5) + 1 / R2 - 3) / 2, 1 / R2 - 1]


def test_coe_features_by_hand():
    feats = coe_features(LAYERS)
    assert feats.dtype == torch.float32 and feats.shape == (3,)
    assert feats.tolist() == pytest.approx(FEATURES, abs=1e-5)
    assert coe_features(LAYERS[:1]).tolist() == [0.0, 0.0, 0.0]  # L = 1: no layer-to-layer change


def test_consistency_scores_and_vote_by_hand():
    f0, f1, f2 = FEATURES
    # f0 - f2 = 1/2 exactly; f0 - f1 ~ 0.56299, f1 - f2 ~ -0.06299
    expected = [((f0 - f1) ** 2 + (f0 - f2) ** 2) / 2,  # ~ 0.28348
                ((f1 - f0) ** 2 + (f1 - f2) ** 2) / 2,  # ~ 0.16046
                ((f2 - f0) ** 2 + (f2 - f1) ** 2) / 2]  # ~ 0.12698
    scores = consistency_scores(coe_features(LAYERS))
    assert scores.dtype == torch.float32
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)
    assert vote(scores) == 2
    # [0, 1, 3]: row 0 differs by 1, 3 -> (1 + 9) / 2; row 1 by 1, 2 -> (1 + 4) / 2; row 2 by 3, 2 -> (9 + 4) / 2
    assert consistency_scores(torch.tensor([0.0, 1.0, 3.0])).tolist() == pytest.approx([5.0, 2.5, 6.5])
    assert consistency_scores(torch.tensor([0.7])).tolist() == [0.0]


def test_vote_and_winner_ties_go_to_the_lowest_index():
    assert vote(torch.tensor([0.3, 0.1, 0.2, 0.1])) == 1
    assert winner([2, 1, 2, 1]) == 1
    assert winner([3, 0, 3]) == 3
    assert winner([4]) == 4


def test_bf16_input_gives_float32_features():
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(5, 4, 16, generator=gen)
    low = states.to(torch.bfloat16)
    feats = coe_features(low)
    assert feats.dtype == torch.float32
    # computed in float32 from the bf16 values, and near the unrounded input's features
    assert torch.allclose(feats, coe_features(low.float()), atol=1e-6)
    assert torch.allclose(feats, coe_features(states), atol=2e-2)


def test_identical_first_and_last_states_stay_finite():
    # h_0 = h_2 = (1,0): ||h_0 - h_2|| and angle(h_0, h_2) are 0, lifted by the clamps
    degenerate = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.0]]])
    assert torch.isfinite(coe_features(degenerate)).all()
    assert torch.isfinite(coe_features(torch.zeros(3, 2, 4))).all()  # zero vectors: norms clamped too
    assert torch.isfinite(consistency_scores(coe_features(degenerate))).all()


# -- the method on the engine (the tiny random generator) -------------------------------------------
from specrej import SamplingParams, best_of_n, load_engine, load_reward  # noqa: E402
from specrej.api import run_one  # noqa: E402
from specrej.records.flops import ModelShape, record_flops  # noqa: E402


def self_truncation_best_of_n(engine, reward, prompt, **params):
    return run_one(engine, reward, prompt, method="st-bon", **params)

PROMPT = "Write a poem about the sea."
BIG = 2**30


def hf_states(engine, prompt_ids, tokens):
    """transformers' own output_hidden_states of prompt + tokens (one row): [L + 1, positions, H]."""
    ids = torch.tensor([prompt_ids + tokens])
    with torch.inference_mode():
        out = engine.model(input_ids=ids, output_hidden_states=True)
    return torch.stack([h[0] for h in out.hidden_states])


@pytest.fixture
def no_stop_engine(generator_dir):
    engine = load_engine(str(generator_dir), dtype="float32")
    engine.stop_token_ids = torch.tensor([-1])  # rows end only at max_new_tokens
    return engine


def test_layer_states_are_transformers_hidden_states_and_change_no_token(no_stop_engine):
    engine = no_stop_engine
    prompt_ids = engine.encode_prompt(PROMPT)
    params = SamplingParams(max_new_tokens=6)
    runs = []
    for collect in (False, True):
        prompt = decoding.prefill(engine.forward, prompt_ids, layer_states=collect)
        rollout = engine.rollout(prompt, 3, 6, params, torch.Generator().manual_seed(1))
        rollout.collect_layer_states = collect
        for _ in range(4):
            rollout.step()
        runs.append((prompt, rollout))
    (_, plain), (prompt, collected) = runs
    assert torch.equal(plain.tokens[:, :4], collected.tokens[:, :4]) and plain.layer_states is None
    for row in range(3):
        reference = hf_states(engine, prompt_ids, collected.tokens[row, :4].tolist())
        torch.testing.assert_close(prompt.layer_states, reference[:, len(prompt_ids) - 1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(collected.layer_states[:, row], reference[:, -1], atol=1e-4, rtol=1e-4)


def test_the_fallback_gives_the_same_layer_states(tiny_model_dir):
    engine = load_engine(str(tiny_model_dir("gemma2")), dtype="float32")
    assert engine.forward_kind == "hf"
    prompt_ids = engine.encode_prompt(PROMPT)
    prompt = decoding.prefill(engine.forward, prompt_ids, layer_states=True)
    rollout = engine.rollout(prompt, 2, 4, SamplingParams(max_new_tokens=4), torch.Generator().manual_seed(0))
    rollout.collect_layer_states = True
    rollout.step()
    rollout.step()
    for row in range(rollout.num_rows):
        reference = hf_states(engine, prompt_ids, rollout.tokens[row, :2].tolist())
        torch.testing.assert_close(prompt.layer_states, reference[:, len(prompt_ids) - 1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(rollout.layer_states[:, row], reference[:, -1], atol=1e-4, rtol=1e-4)


def test_n_1_is_best_of_1(engine):
    reward = load_reward("python:toy_rewards:length")
    sampling = SamplingParams(max_new_tokens=20)
    st = self_truncation_best_of_n(engine, reward, PROMPT, n=1, memory_budget=BIG, sampling=sampling, seed=5)
    bon = best_of_n(engine, reward, PROMPT, n=1, memory_budget=BIG, sampling=sampling, seed=5)
    assert st.best.token_ids == bon.best.token_ids and st.best.text == bon.best.text
    assert st.rounds[0].rule["c"] == 1 and st.rounds[0].rule["winner"] == 0


def test_the_vote_recomputed_from_transformers_hidden_states(no_stop_engine):
    """c, tau, the votes and the winner, recomputed independently: the same seed's rows sampled
    by a plain rollout, c by `truncation_point`, each position's states from transformers'
    forward over prompt + tokens, the running means, features and votes by hand."""
    engine, n, sampling, seed = no_stop_engine, 6, SamplingParams(max_new_tokens=24), 2
    result = self_truncation_best_of_n(engine, load_reward("python:toy_rewards:length"), PROMPT, n=n,
                                       memory_budget=BIG, sampling=sampling, seed=seed)
    rule = result.rounds[0].rule
    prompt_ids = engine.encode_prompt(PROMPT)
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), n, 24, sampling, torch.Generator().manual_seed(seed))
    c = None
    while c is None or rollout.length < c + max(1, int(c)) - 1:
        rollout.step()
        c = truncation_point(rollout.tokens[:, : rollout.length], [])
    tau, stop_step = window(c, 1.0)
    assert (rule["c"], rule["tau"], rule["stop_step"], rule["ended"]) == (c, tau, stop_step, "window")
    assert result.rounds[0].decision_token == stop_step - 1
    tokens = rollout.tokens[:, : stop_step - 1]
    # positions 0 .. stop_step - 1: the prompt's last token, then generated tokens 0 .. stop_step - 2
    states = torch.stack([hf_states(engine, prompt_ids, tokens[i].tolist())[:, len(prompt_ids) - 1:]
                          for i in range(n)], dim=1)  # [L + 1, n, positions, H]
    votes = []
    for end in range(stop_step - tau + 1, stop_step + 1):
        means = states[:, :, :end].mean(dim=2)
        votes.append(vote(consistency_scores(coe_features(means))))
    assert rule["votes"] == votes and rule["winner"] == winner(votes)
    chosen = result.candidates[rule["winner"]]
    assert chosen.token_ids[: stop_step - 1] == tokens[rule["winner"]].tolist()  # unchanged when it continued
    assert [c.id for c in result.finalists] == [chosen.id] and result.best is chosen
    assert all(c.halted_round == 0 and c.final_score is None for c in result.candidates if c is not chosen)


def test_the_winner_continues_in_place_and_only_it_is_scored(engine):
    scored = []

    class CountingReward:
        name = "counting"

        def score(self, prompt, responses):
            scored.extend(responses)
            return [float(len(r.token_ids)) for r in responses]

    result = self_truncation_best_of_n(engine, CountingReward(), PROMPT, n=8, memory_budget=BIG,
                                       sampling=SamplingParams(max_new_tokens=32), seed=0)
    best = result.best
    assert len(scored) == 1 and scored[0].token_ids == best.token_ids and result.tokens["scored"] == best.num_tokens
    assert best.text == engine.detokenize([best.token_ids])[0]
    # its log-probs are the model's own over prompt + its tokens: the pruned cache held its KV
    prompt_ids = engine.encode_prompt(PROMPT)
    ids = torch.tensor([prompt_ids + best.token_ids])
    with torch.inference_mode():
        logits = engine.model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
    expected = logits.log_softmax(-1).gather(1, ids[0, len(prompt_ids):, None])[:, 0]
    torch.testing.assert_close(torch.tensor(best.token_logprobs), expected, atol=2e-4, rtol=0)
    flops = record_flops(result.to_record("p0"), ModelShape.from_config(engine.config), None, len(prompt_ids))
    assert flops["reward"] == 0 and flops["generate"] > 0  # the record follows the engine's accounting


def test_a_full_budget_votes_early_or_fails_as_asked(no_stop_engine):
    from specrej import SpecrejError
    from specrej.engine.budget import token_capacity

    engine = no_stop_engine
    prompt_len = len(engine.encode_prompt(PROMPT))
    budget = 1
    while token_capacity(budget, engine.kv_bytes_per_token, prompt_len, len(engine.layers)) < 16 * 2:
        budget *= 2  # the smallest power of two that holds 2 tokens for each of 16 rows
    capacity = token_capacity(budget, engine.kv_bytes_per_token, prompt_len, len(engine.layers))
    sampling = SamplingParams(max_new_tokens=min(24, capacity))
    reward = load_reward("python:toy_rewards:length")
    result = self_truncation_best_of_n(engine, reward, PROMPT, n=16, memory_budget=budget, sampling=sampling)
    rule = result.rounds[0].rule
    if rule["ended"] == "memory":  # the 16 rows' KV filled before c + tau - 1 tokens
        assert result.rounds[0].decision_token == capacity // 16 and len(rule["votes"]) <= rule["voted_steps"]
        with pytest.raises(SpecrejError, match="filled the memory budget"):
            self_truncation_best_of_n(engine, reward, PROMPT, n=16, memory_budget=budget, sampling=sampling,
                                      when_full="fail")
    else:
        assert rule["stop_step"] - 1 <= capacity // 16
    assert result.best.num_tokens <= sampling.max_new_tokens
