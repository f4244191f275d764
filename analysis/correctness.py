"""The correlation study asked of correctness (issue 50): how well the partial reward at each
decision token predicts that a candidate ends with the right answer, from a prefix table
(``specrej.records.io.PREFIX_COLUMNS``) and ``analysis.accuracy.candidate_frame`` output."""

import math

import numpy as np
import pandas as pd
from scipy import stats

from analysis._columns import require_columns
from analysis.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_weights, percentile_interval
from specrej.records.io import PREFIX_COLUMNS  # torch-free


def correctness_prediction(prefix_table: pd.DataFrame, candidates: pd.DataFrame,
                           confidence_level: float = DEFAULT_CONFIDENCE, n_resamples: int = DEFAULT_RESAMPLES,
                           seed: int = 0) -> pd.DataFrame:
    """How well the partial reward at each decision token predicts that the candidate ends correct.

    The prefix table (``specrej.records.io.PREFIX_COLUMNS``; its prompt_id is the record's id as
    text) is joined on (prompt_id, candidate_id) with ``candidate_frame`` output of the one run it
    was scored from (prompt ids compared as text); prefix rows without a checked candidate are
    left out.  One row per tau: n_prompts, n_candidates, n_correct, then, each with _lo/_hi (a
    ``confidence_level`` percentile interval over ``n_resamples`` resamples of prompts, the same
    for every statistic of a tau):

    - auroc_within: the mean over prompts of the prompt's AUROC, U / (n_correct n_wrong) with U
      the Mann-Whitney statistic of its correct candidates' partial scores against its wrong
      ones' (``scipy.stats.mannwhitneyu``; ties count one half), over the prompts with both kinds
      (n_prompts_within): how well the score ranks candidates *of one prompt*, as SR ranks them;
    - auroc_pooled: the same over every candidate of every prompt at once, where the prompts'
      difficulty enters too;
    - pointbiserial_within / pointbiserial_pooled: ``scipy.stats.pointbiserialr`` of correct on
      the partial score, likewise (finite scores only; NaN where either is constant).
    """
    require_columns(prefix_table, PREFIX_COLUMNS, "prefix table")
    require_columns(candidates, ["prompt_id", "candidate_id", "correct"], "candidate frame")
    checked = candidates[candidates["candidate_id"].notna()]
    labels = pd.DataFrame({"prompt_id": checked["prompt_id"].map(str).astype(str),
                           "candidate_id": checked["candidate_id"].astype("int64"),
                           "correct": checked["correct"].astype(bool)})
    if labels.duplicated(["prompt_id", "candidate_id"]).any():
        raise ValueError("candidates hold a (prompt, candidate) twice: pass the candidates of the one run "
                         "the prefix table was scored from")
    prefixes = prefix_table.assign(prompt_id=prefix_table["prompt_id"].astype(str),
                                   candidate_id=prefix_table["candidate_id"].astype("int64"))
    joined = prefixes.merge(labels, on=["prompt_id", "candidate_id"], how="inner", validate="many_to_one")
    if joined.empty:
        raise ValueError("no prefix row matches a candidate with a reference answer")
    rows = [{"tau": tau, **_prediction_at_tau(at_tau, confidence_level, n_resamples, seed)}
            for tau, at_tau in joined.groupby("tau", sort=True)]
    return pd.DataFrame(rows).assign(confidence_level=confidence_level, bootstrap_resamples=n_resamples)


def _prediction_at_tau(rows: pd.DataFrame, confidence_level: float, n_resamples: int, seed: int) -> dict:
    prompts = sorted(rows["prompt_id"].unique())
    code = rows["prompt_id"].map({prompt: i for i, prompt in enumerate(prompts)}).to_numpy(dtype=int)
    score, correct = rows["partial_score"].to_numpy(dtype=float), rows["correct"].to_numpy(dtype=bool)
    within = np.array([_predictions(score[code == i], correct[code == i]) for i in range(len(prompts))])  # (P, 2)
    # column 0 is the sample itself, the others its resamples: one formula for both
    weights = np.hstack([np.ones((len(prompts), 1), dtype=int), bootstrap_weights(len(prompts), n_resamples, seed).T])
    finite = np.isfinite(within)
    with np.errstate(divide="ignore", invalid="ignore"):
        within_means = (np.where(finite, within, 0.0).T @ weights) / (finite.T.astype(float) @ weights)
    pooled = np.array([_predictions(np.repeat(score, w[code]), np.repeat(correct, w[code])) for w in weights.T]).T
    result = {"n_prompts": len(prompts), "n_candidates": len(rows), "n_correct": int(correct.sum()),
              "n_prompts_within": int(finite[:, 0].sum())}
    statistics = {"auroc_within": within_means[0], "auroc_pooled": pooled[0],
                  "pointbiserial_within": within_means[1], "pointbiserial_pooled": pooled[1]}
    for name, values in statistics.items():
        (low, high), = percentile_interval(values[1:], confidence_level)
        result |= {name: float(values[0]), f"{name}_lo": low, f"{name}_hi": high}
    return result


def _predictions(score: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(AUROC, point-biserial r) of ``score`` for ``correct``: P(a correct candidate's score > a
    wrong one's) + half the ties, NaN without both kinds; r over the finite scores, NaN when the
    scores or the labels are constant."""
    right, wrong = score[correct], score[~correct]
    auroc = math.nan if not (right.size and wrong.size) else float(
        stats.mannwhitneyu(right, wrong, method="asymptotic").statistic / (right.size * wrong.size))
    finite = np.isfinite(score)
    if np.unique(score[finite]).size < 2 or np.unique(correct[finite]).size < 2:
        return auroc, math.nan
    return auroc, float(stats.pointbiserialr(correct[finite], score[finite]).statistic)
