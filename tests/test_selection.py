"""The cut of eq. 4-5 on hand-worked scores."""

import pytest

from specrej.methods.cuts import accepted, num_kept, rejection_cutoff


def test_cutoff_is_the_alpha_lower_quantile_and_ties_go_on():
    scores = [1.0, 3.0, 2.0, 2.0, 0.5]
    # alpha 0.5 of 5: ceil(2.5) = 3 kept by rank; the 3rd highest is 2.0, and both 2.0s go on
    assert rejection_cutoff(scores, 0.5) == 2.0
    assert accepted(scores, 0.5) == [False, True, True, True, False]
    # alpha 0.7: ceil(1.5) = 2; the 2nd highest is 2.0, tied with the 3rd: 3 go on, not 2
    assert num_kept(5, 0.7) == 2 and accepted(scores, 0.7) == [False, True, True, True, False]
    assert accepted(scores, 0.0) == [True] * 5  # alpha = 0 keeps everything: Best-of-N


def test_minus_inf_scores_are_cut_first_and_an_empty_batch_is_refused():
    assert accepted([float("-inf"), 0.0, float("-inf")], 0.7) == [False, True, False]
    assert accepted([float("-inf"), 0.0, float("-inf")], 0.5) == [True] * 3  # r_cut is -inf itself
    with pytest.raises(ValueError):
        rejection_cutoff([], 0.5)
