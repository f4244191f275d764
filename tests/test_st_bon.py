"""ST-BoN's pure functions (truncation point, window, CoE features, scores, votes) on hand-worked inputs."""

import math

import pytest
import torch

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
