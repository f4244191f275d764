"""analysis.correlation against synthetic data with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.correlation import (
    best_survives,
    kendall_tau_a,
    ols_band,
    oracle_cutoff,
    prompt_tau_statistics,
    summarize_by_tau,
    tokens_saved_fraction,
)
from specrej.methods.cuts import num_kept

# Any warning (constant-input, divide-by-zero, deprecations) fails the test: degenerate groups
# must be handled, not shouted about.
pytestmark = pytest.mark.filterwarnings("error")


def prefix_table(partial, final, num_tokens=None, tau=16, prompt_id="p0") -> pd.DataFrame:
    n = len(partial)
    num_tokens = np.full(n, 100) if num_tokens is None else np.asarray(num_tokens)
    return pd.DataFrame(
        {
            "prompt_id": prompt_id,
            "candidate_id": np.arange(n),
            "tau": tau,
            "partial_score": np.asarray(partial, dtype=float),
            "final_score": np.asarray(final, dtype=float),
            "num_tokens": num_tokens,
            "finished_before_tau": num_tokens <= tau,
        }
    )


def bivariate_normal(rho: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    draws = np.random.default_rng(seed).multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n)
    return draws[:, 0], draws[:, 1]


def test_correlations_recover_a_known_bivariate_normal():
    rho = 0.8
    partial, final = bivariate_normal(rho, n=5000, seed=1)
    row = prompt_tau_statistics(prefix_table(partial, final)).iloc[0]
    assert row["n"] == 5000
    assert row["pearson"] == pytest.approx(rho, abs=0.02)
    # Greiner's relation for a bivariate normal: tau = (2 / pi) * arcsin(rho) ≈ 0.590.
    assert row["kendall"] == pytest.approx(2 / math.pi * math.asin(rho), abs=0.02)
    assert row["ols_slope"] == pytest.approx(rho, abs=0.03)  # unit variances: slope = rho
    assert row["ols_r2"] == pytest.approx(rho**2, abs=0.03)


def explicit_tau_a(x, y) -> float:
    """Appendix B's formula written out: 2 / (N(N-1)) · Σ_{i<j} sgn(x_i - x_j) sgn(y_i - y_j)."""
    n, total = len(x), 0.0
    for i in range(n):
        for j in range(i + 1, n):
            total += np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
    return 2 * total / (n * (n - 1))


def test_kendall_is_the_papers_tau_a_and_kendall_b_corrects_for_ties():
    # 4 concordant pairs, no discordant ones, one pair tied in each score:
    # tau_a = 4/6, tau_b = 4 / sqrt((6 - 1) * (6 - 1)) = 0.8.
    row = prompt_tau_statistics(prefix_table([1, 1, 2, 3], [1, 2, 2, 3])).iloc[0]
    assert row["kendall"] == pytest.approx(4 / 6)
    assert row["kendall_b"] == pytest.approx(0.8)


def test_tau_a_and_tau_b_on_a_hand_example_with_ties():
    partial = [-0.5, -0.5, -0.5, -0.5, -0.8, -1.0, -1.2, -0.3]
    final = [-0.4, -0.6, -0.5, -0.7, -0.9, -1.1, -1.0, -0.2]
    # 28 pairs: 6 tied in partial, 21 concordant, 1 discordant → tau_a = 20/28.
    assert explicit_tau_a(partial, final) == pytest.approx(20 / 28)
    row = prompt_tau_statistics(prefix_table(partial, final)).iloc[0]
    assert row["kendall"] == pytest.approx(0.714, abs=5e-4)
    assert row["kendall"] == pytest.approx(explicit_tau_a(partial, final))
    # tau_b = 20 / sqrt((28 - 6) * 28) = 0.806
    assert row["kendall_b"] == pytest.approx(20 / math.sqrt(22 * 28))
    assert row["kendall_b"] == pytest.approx(0.806, abs=5e-4)


def test_tau_a_matches_the_double_loop_on_random_tied_data():
    rng = np.random.default_rng(7)
    for _ in range(5):
        x, y = rng.integers(0, 4, size=30).astype(float), rng.integers(0, 5, size=30).astype(float)
        assert kendall_tau_a(x, y) == pytest.approx(explicit_tau_a(x, y))


def test_independent_scores_give_no_correlation():
    partial, final = bivariate_normal(0.0, n=5000, seed=2)
    row = prompt_tau_statistics(prefix_table(partial, final)).iloc[0]
    assert abs(row["pearson"]) < 0.05 and abs(row["kendall"]) < 0.05


# Hand-computed example at tau = 16.  The best final score (5) belongs to candidate 1,
# whose partial score 0.5 is the oracle cutoff c*.  Candidates 0 and 3 lie below it:
# candidate 0 would still generate 40 - 16 = 24 tokens, candidate 3 ended at 8 < 16 tokens
# and saves nothing.  All candidates generate 40 + 60 + 20 + 8 + 30 = 158 tokens.
HAND_PARTIAL = [0.1, 0.5, 0.9, 0.3, 0.7]
HAND_FINAL = [1.0, 5.0, 2.0, 4.0, 3.0]
HAND_TOKENS = [40, 60, 20, 8, 30]


def test_oracle_cutoff_and_tokens_saved_on_a_hand_example():
    row = prompt_tau_statistics(prefix_table(HAND_PARTIAL, HAND_FINAL, HAND_TOKENS, tau=16)).iloc[0]
    assert row["oracle_cutoff"] == 0.5
    assert row["tokens_saved_frac"] == pytest.approx(24 / 158)


def test_best_survives_a_quantile_cut_only_if_it_ranks_high_enough():
    # Partial ranks: 0.9, 0.7, 0.5 (the best final), 0.3, 0.1.
    row = prompt_tau_statistics(
        prefix_table(HAND_PARTIAL, HAND_FINAL, HAND_TOKENS), alphas=(0.5, 0.7, 0.9)
    ).iloc[0]
    assert row["best_survives_alpha_0.5"]  # keeps ceil(2.5) = 3 → rank 3 survives
    assert not row["best_survives_alpha_0.7"]  # keeps ceil(1.5) = 2
    assert not row["best_survives_alpha_0.9"]  # keeps 1


def test_quantile_cut_keeps_every_candidate_tied_at_the_cutoff():
    partial = np.array([3.0, 2.0, 2.0, 1.0])
    final = np.array([0.0, 0.0, 5.0, 0.0])  # the best is the second of the two tied at 2.0
    assert best_survives(partial, final, alpha=0.5)  # keep 2, plus the tie → 3 kept


def test_kept_count_is_not_fooled_by_floating_point():
    assert num_kept(10, 0.7) == 3  # (1 - 0.7) * 10 is 3.0000000000000004
    assert num_kept(5, 0.5) == 3
    assert num_kept(4, 0.99) == 1


def test_tied_best_final_scores_take_the_highest_partial_as_cutoff():
    partial, final = np.array([0.2, 0.8, 0.5]), np.array([1.0, 1.0, 0.0])
    assert oracle_cutoff(partial, final) == 0.8
    # Stopped: 0.2 and 0.5 → (50 - 10) + (30 - 10) = 60 of 100 tokens.
    assert tokens_saved_fraction(partial, final, np.array([50, 20, 30]), tau=10) == pytest.approx(0.6)


def test_degenerate_groups_give_nan_without_warnings():
    prefixes = pd.concat(
        [
            prefix_table([1.0, 2.0], [1.0, 2.0], prompt_id="two_candidates"),
            prefix_table([1.0, 2.0, 3.0], [4.0, 4.0, 4.0], prompt_id="constant_final"),
            prefix_table([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], prompt_id="constant_partial"),
        ]
    )
    statistics = prompt_tau_statistics(prefixes).set_index("prompt_id")
    for column in ["pearson", "kendall", "kendall_b", "ols_slope", "ols_r2"]:
        assert statistics[column].isna().all(), column
    # The oracle quantities stay defined: they need no variation.
    assert statistics["oracle_cutoff"].notna().all()
    assert statistics.loc["constant_partial", "tokens_saved_frac"] == 0.0  # nobody is below c*


def test_one_row_per_prompt_and_tau_with_the_contract_columns():
    partial, final = bivariate_normal(0.5, n=20, seed=3)
    prefixes = pd.concat(
        [prefix_table(partial, final, tau=tau, prompt_id=p) for p in ("a", "b") for tau in (8, 32)]
    )
    statistics = prompt_tau_statistics(prefixes, alphas=(0.5,))
    assert list(statistics[["prompt_id", "tau"]].itertuples(index=False, name=None)) == [
        ("a", 8), ("a", 32), ("b", 8), ("b", 32)
    ]
    assert list(statistics.columns) == [
        "prompt_id", "tau", "n", "pearson", "kendall", "kendall_b", "ols_slope", "ols_r2",
        "oracle_cutoff", "tokens_saved_frac", "best_survives_alpha_0.5",
    ]


def test_missing_contract_column_is_named():
    with pytest.raises(ValueError, match="num_tokens"):
        prompt_tau_statistics(prefix_table([1, 2, 3], [1, 2, 3]).drop(columns="num_tokens"))


def test_ols_band_brackets_the_fit_and_recovers_an_exact_line():
    partial = np.linspace(0, 1, 30)
    noise = np.random.default_rng(4).normal(0, 0.1, size=30)
    band = ols_band(partial, 2.0 * partial + 1.0 + noise, grid_size=11)
    assert len(band) == 11
    assert (band["ci_low"] < band["fit"]).all() and (band["fit"] < band["ci_high"]).all()
    assert band["fit"].iloc[0] == pytest.approx(1.0, abs=0.1)
    assert band["fit"].iloc[-1] == pytest.approx(3.0, abs=0.1)
    # The band of the mean is narrowest near the centre of the data.
    widths = band["ci_high"] - band["ci_low"]
    assert widths.iloc[5] < widths.iloc[0] and widths.iloc[5] < widths.iloc[-1]


def test_ols_band_is_empty_for_degenerate_data():
    assert ols_band(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])).empty


def test_summary_bootstraps_a_ci_around_the_mean_and_skips_nan():
    rng = np.random.default_rng(5)
    statistics = pd.DataFrame(
        {
            "prompt_id": np.arange(40),
            "tau": 16,
            "pearson": np.r_[rng.normal(0.6, 0.1, size=39), np.nan],
            "kendall": rng.normal(0.4, 0.1, size=40),
            "tokens_saved_frac": rng.uniform(0.5, 0.9, size=40),
            "best_survives_alpha_0.5": True,
        }
    )
    summary = summarize_by_tau(statistics, n_resamples=500, seed=0).set_index("metric")
    pearson = summary.loc["pearson"]
    assert pearson["n_prompts"] == 39
    assert pearson["ci_low"] < pearson["mean"] < pearson["ci_high"]
    assert pearson["mean"] == pytest.approx(statistics["pearson"].mean())
    # Standard error of a mean of 39 draws with sd 0.1 is 0.016: a 95% CI spans about ±0.03.
    assert 0.03 < pearson["ci_high"] - pearson["ci_low"] < 0.1
    survives = summary.loc["best_survives_alpha_0.5"]
    assert (survives["mean"], survives["ci_low"], survives["ci_high"]) == (1.0, 1.0, 1.0)
    again = summarize_by_tau(statistics, n_resamples=500, seed=0).set_index("metric")
    assert again.loc["pearson", "ci_low"] == pearson["ci_low"]  # seeded: reproducible


def test_an_empty_response_ranks_last_and_stays_out_of_the_correlations():
    # An empty response scores -inf under the log-prob reward (a mean over no tokens). With it, the
    # other four are an exact line final = 2 * partial: Pearson, both Kendall taus and R² 1,
    # slope 2, as they are without it; the oracle keeps it out (c* = 0.4, the best's partial),
    # and an alpha = 0.5 cut keeps the top half of the five (0.3, 0.4 and nothing else).
    inf = -math.inf
    partial, final = [inf, 0.1, 0.2, 0.3, 0.4], [inf, 0.2, 0.4, 0.6, 0.8]
    row = prompt_tau_statistics(prefix_table(partial, final, num_tokens=[0, 100, 100, 100, 100], tau=10),
                                alphas=(0.5,)).iloc[0]
    assert row["n"] == 5
    assert row["pearson"] == pytest.approx(1.0) and row["kendall"] == pytest.approx(1.0)
    assert row["kendall_b"] == pytest.approx(1.0)
    assert row["ols_slope"] == pytest.approx(2.0) and row["ols_r2"] == pytest.approx(1.0)
    assert row["oracle_cutoff"] == 0.4 and bool(row["best_survives_alpha_0.5"])
    # stopped below c*: 0.1, 0.2, 0.3 and the empty one: 3 x (100 - 10) of 400 tokens
    assert row["tokens_saved_frac"] == pytest.approx(270 / 400)
    band = ols_band(np.array(partial), np.array(final), grid_size=3)
    assert band["fit"].to_numpy() == pytest.approx([0.2, 0.5, 0.8])
