"""The headline in detail (``results/tables/headline.md``): every setting of every method on its
pair's Best-of-N curve, each method's statement, the tokens each saves in full and the notes per
setting; what the one-page summary (``analysis.summary_page``) leaves out."""

import math

import numpy as np
import pandas as pd

from analysis.headline import PAIR
from analysis.page import Block, Heading, Paragraph, Strong, Table, Text, text, to_markdown
from analysis.summary_format import (bullets, compute_measure_of, compute_words, display_name, joined, maybe,
                                     percent, score_text, table, where_on_curve, whole, with_ci)
from analysis.settings import reference_label
from analysis.tables import MISSING, NO_RESPONSE, format_ratio
from analysis.summary_page import SCORE_EQ8, _of_pair, _ordered, method_order

DETAILS_TITLE = "Headline in detail: every setting"


def render_details_markdown(headline: pd.DataFrame, *args, **kwargs) -> str:
    """``details_page`` (same arguments) as Markdown."""
    return to_markdown(details_page(headline, *args, **kwargs))


def details_page(
    headline: pd.DataFrame,
    savings: pd.DataFrame | None = None,
    normalization: str = "bon_min_range",
    correlation_resamples: int | None = None,
    title: str = DETAILS_TITLE,
    unanswered: pd.DataFrame | None = None,
    compute: str | None = None,
) -> list[Block]:
    """Everything the headline page leaves out (``results/tables/headline.md``): per pair the
    table of every setting with its BoN-equivalent compute, the Best-of-N it equals (≈ Bo-N),
    the speedup at equal score in compute and in FLOPs, the share of resamples inside the curve
    and where it lands; one statement per method (its best setting and the speedup at equal score,
    or where it lands outside the Best-of-N curve), the methods in ``method_order``; a sentence per
    setting in ``unanswered``; the tokens each method saved, with its first decision token, b_init
    and min_tokens, beside the oracle bound; the notes of each setting (prompts used, zero-spread
    prompts, out-of-range points, resamples outside the curve, the equal-N assumption with the
    measured ladder, a reading on the N axis); then the intervals' confidence level and resamples."""
    measure = compute_measure_of(headline, compute)
    intro = ("Per generator / reward pair and per method: every setting, then its best setting — the largest "
             "speedup at equal score among the method's settings whose score lies inside the measured Best-of-N "
             "curve — then the tokens each saves. The study's summary page (summary.md) has the headline.")
    blocks: list[Block] = [Heading(1, text(title)), Paragraph(text(intro))]
    score_name = SCORE_EQ8 if normalization == "bon_min_range" else "improvement, Best-of-N-range normalisation"
    for pair, rows in headline.groupby(PAIR, sort=False):
        order = method_order(rows)
        rows = _ordered(rows)
        silent = _of_pair(unanswered, pair)
        blocks += [Heading(2, text(str(pair))), _detail_table(rows, silent)]
        for _, mine in rows.groupby("method", sort=False):
            blocks.append(Paragraph(_statement(mine.reset_index(drop=True), score_name)))
        for row in silent.itertuples():
            blocks.append(Paragraph(text(Strong(str(row.method_label)), f" completed no response on any prompt "
                                         f"({row.error}): it has no score, and it leaves out no prompt of the "
                                         "other methods.")))
        if savings is not None and not savings.empty and pair in set(savings[PAIR]):
            mine = savings[savings[PAIR] == pair]
            for method in [m for m in order if m in set(mine["method"])]:
                blocks.append(Paragraph(_token_line(mine[mine["method"] == method].reset_index(drop=True))))
        blocks.append(bullets(_pair_notes(rows, score_name)))
    blocks += [Heading(2, text("Notes")),
               bullets(_global_notes(headline, savings, normalization, correlation_resamples, measure))]
    return blocks


def _statement(rows: pd.DataFrame, score_name: str) -> Text:
    """One method's paragraph: its best setting against Best-of-N."""
    bon_min, bon_max = reference_label(rows['bon_min_n'].iloc[0]), reference_label(rows['bon_max_n'].iloc[0])
    name = display_name(rows.iloc[0])
    bests = rows[rows["best"]]
    if bests.empty:
        return text(f"No setting of {name} has a finite score on this pair: nothing to compare.")
    best = bests.iloc[0]
    score = text(Strong(str(best["method_label"])), f" scores {with_ci(best, 'improvement', score_text)} "
                 f"({score_name}; {bon_min} = {score_text(best['bon_min_improvement'])}) at "
                 f"{with_ci(best, 'relative_compute', format_ratio, '×')} {bon_min}'s compute{_beside(best, 'relative_flops', 'its FLOPs')}")
    if best["in_range"]:
        speedup = best["compute_speedup"]
        saving = (f"{with_ci(best, 'compute_speedup', format_ratio, '×')} less compute at equal score"
                  if speedup >= 1 else
                  f"a speedup of only {with_ci(best, 'compute_speedup', format_ratio, '×')} at equal score: "
                  "Best-of-N reaches this score with less compute")
        equivalent_n = reference_label(with_ci(best, "equivalent_n", whole))
        statement = text(score, f"; Best-of-N needs ≈ {with_ci(best, 'bon_equivalent_compute', format_ratio, '×')} "
                                f"{bon_min}'s compute to match it (≈ {equivalent_n}): {saving}"
                                f"{_beside(best, 'flops_speedup', 'in FLOPs')}.")
        if np.isfinite(best["bon_equivalent_in_range_frac"]):
            statement = text(statement, f" It lands inside the Best-of-N curve in "
                                        f"{percent(best['bon_equivalent_in_range_frac'])} of the bootstrap resamples.")
        higher = rows[~rows["in_range"] & (rows["improvement"] > best["improvement"])]
        if not higher.empty:
            statement = text(statement, " ", joined(higher["method_label"]),
                             f" {'scores' if len(higher) == 1 else 'score'} higher but outside the measured Best-of-N "
                             "range, so no speedup at equal score is measured for "
                             f"{'it' if len(higher) == 1 else 'them'} (see the table and notes).")
        return statement
    opening = text(f"No setting of {name} lands inside the measured Best-of-N curve ({bon_min} = "
                   f"{score_text(best['bon_min_improvement'])} to {bon_max} = "
                   f"{score_text(best['bon_max_improvement'])}). Its "
                   "highest-scoring: ", score, f", {where_on_curve(best, bon_min, bon_max)}")
    if best["bon_equivalent_status"] == "below_range":
        return text(opening, ".")
    return text(opening, f", so no measured Best-of-N matches it. {_extrapolation(best)}")


def _beside(row: pd.Series, column: str, words: str) -> str:
    """" (0.8× [0.7, 0.9] <words>)" from a FLOP ratio beside its compute ratio (FLOPs are any
    machine's, compute this machine's); "" without FLOP counts."""
    finite = np.isfinite(row.get(column, math.nan))
    return f" ({with_ci(row, column, format_ratio, '×')} {words})" if finite else ""


def _extrapolation(row: pd.Series) -> str:
    """The Best-of-N extrapolated above the ladder."""
    compute = row["bon_equivalent_compute_extrapolated"]
    if not np.isfinite(compute):
        return "The Best-of-N curve does not rise at that end, so no extrapolation is given."
    return (f"Extending the end segment of the Best-of-N curve (extrapolated, not measured): "
            f"≈ {format_ratio(compute)}× {reference_label(row['bon_min_n'])}'s compute "
            f"(≈ {reference_label(whole(row['equivalent_n_extrapolated']))}), "
            f"a speedup of ≈ {format_ratio(row['compute_speedup_extrapolated'])}× (extrapolated).")


def _detail_table(rows: pd.DataFrame, silent: pd.DataFrame | None = None) -> Table:
    bon_min, bon_max = reference_label(rows['bon_min_n'].iloc[0]), reference_label(rows['bon_max_n'].iloc[0])
    flops = "relative_flops" in rows.columns and np.isfinite(rows["relative_flops"].astype(float)).any()
    cells = []
    for _, row in rows.iterrows():
        label = text(Strong(str(row["method_label"])), " (best)") if row["best"] else text(str(row["method_label"]))
        inside, below = bool(row["in_range"]), row["bon_equivalent_status"] == "below_range"
        extrapolated = "(extrapolated) "
        cells.append({
            "Setting": label,
            "score": with_ci(row, "improvement", score_text),
            f"compute (× {bon_min})": with_ci(row, "relative_compute", format_ratio),
            **({f"FLOPs (× {bon_min})": with_ci(row, "relative_flops", format_ratio)} if flops else {}),
            f"BoN-equivalent compute (× {bon_min})": (
                with_ci(row, "bon_equivalent_compute", format_ratio) if inside
                else maybe(extrapolated, row["bon_equivalent_compute_extrapolated"], format_ratio)),
            "≈ Best-of-N": (
                reference_label(with_ci(row, "equivalent_n", whole)) if inside else f"below {bon_min}" if below
                else maybe(extrapolated, row["equivalent_n_extrapolated"], lambda n: reference_label(whole(n)))),
            "speedup at equal score": (
                with_ci(row, "compute_speedup", format_ratio) if inside
                else maybe(extrapolated, row["compute_speedup_extrapolated"], format_ratio)),
            **({"FLOPs speedup": with_ci(row, "flops_speedup", format_ratio)} if flops else {}),
            "in range (resamples)": percent(row["bon_equivalent_in_range_frac"]),
            "where": {"interpolated": "inside", "above_range": f"above {bon_max}",
                      "below_range": f"below {bon_min}"}.get(row["bon_equivalent_status"],
                                                             row["bon_equivalent_status"]),
        })
    for label in ([] if silent is None or silent.empty else silent["method_label"]):
        cells.append({column: MISSING for column in cells[0]} | {"Setting": str(label), "score": NO_RESPONSE})
    return table("Setting", cells)


def _token_line(savings: pd.DataFrame) -> Text:
    """The tokens one method saved on a pair, beside the oracle bound."""
    first = savings.iloc[0]
    name = display_name(first)
    token = first["first_decision_token"]
    low, high = first["first_decision_token_min"], first["first_decision_token_max"]
    if not np.isfinite(token):
        decision = f"{name}'s first decision token was not recorded"
    else:
        spread = f"; tokens {whole(low)}–{whole(high)} across prompts" if low != high else ""
        origin = "" if first["decision_token_source"] == "rounds" else ", taken as min_tokens: rounds not recorded"
        decision = (f"{name}'s first rejection comes at token {whole(token)} "
                    f"(b_init = {whole(first['init_batch_size'])}, "
                    f"min_tokens = {whole(first['min_tokens'])}{spread}{origin})")
    if not first["correlation_taus"]:
        oracle = "no correlation study covers this pair, so there is no oracle bound"
    elif not np.isfinite(first["oracle_tau"]):
        oracle = "no oracle bound (no decision token to match)"
    else:
        bound = (f"an oracle that stops there every candidate that will not end best saves "
                 f"{with_ci(first, 'oracle_tokens_saved_frac', percent)} of the generated tokens "
                 f"(correlation study, {whole(first['oracle_n_prompts'])} prompts)")
        if first["oracle_tau_exact"]:
            oracle = bound
        else:
            oracle = (f"the correlation study did not score τ = {whole(token)} (its τ: {first['correlation_taus']}); "
                      f"at the nearest, τ = {whole(first['oracle_tau'])}, "
                      + bound.replace("stops there", "stops at that τ"))
    actual = "; ".join(
        f"{row['method_label']} {with_ci(row, 'tokens_saved_frac', percent)}" for _, row in savings.iterrows())
    return text(Strong(f"Tokens ({name})."), f" {decision}; {oracle}. {name} saved, of the tokens "
            f"Best-of-{whole(first['init_batch_size'])} would generate running every candidate to completion on the "
            f"same prompt (mean response length from {reference_label(whole(first['reference_bon_n']))}'s candidates; "
            f"{int(first['n_prompts'])} prompts): {actual}.")


def _pair_notes(rows: pd.DataFrame, score_name: str) -> list[str]:
    first = rows.iloc[0]
    bon_min, bon_max = reference_label(first['bon_min_n']), reference_label(first['bon_max_n'])
    notes = []
    if "n_prompts" in rows.columns:
        used = (f"; {score_name} defined on {int(first['n_prompts_improvement'])}"
                if "n_prompts_improvement" in rows.columns else "")
        notes.append(f"Prompts: {int(first['n_prompts'])} answered by every configuration{used}.")
    zero = first.get("zero_spread_prompts", "")
    if zero:
        notes.append(f"Zero-spread prompts ({bon_min}'s rewards all equal, so no {score_name} score; left out "
                     f"of the scores): {zero.replace(',', ', ')}.")
    for _, row in rows[~rows["in_range"]].iterrows():
        where = where_on_curve(row, bon_min, bon_max)
        extrapolated = ("no Best-of-N is cheaper than the cheapest, so it has no Best-of-N equivalent"
                        if row["bon_equivalent_status"] == "below_range" else
                        f"its Best-of-N equivalent is extrapolated (marked \"(extrapolated)\"): "
                        f"≈ {format_ratio(row['bon_equivalent_compute_extrapolated'])}× {bon_min}'s compute"
                        if np.isfinite(row["bon_equivalent_compute_extrapolated"])
                        else "no Best-of-N equivalent, measured or extrapolated")
        notes.append(f"Out of range: {row['method_label']} scores {where}; {extrapolated}.")
    for _, row in rows[rows["in_range"] & (rows["bon_equivalent_in_range_frac"] < 1)].iterrows():
        notes.append(f"{row['method_label']} falls outside the Best-of-N curve in "
                     f"{percent(1 - row['bon_equivalent_in_range_frac'])} of the resamples; there its BoN-equivalent "
                     f"is censored at the curve's end ({bon_max}'s compute above it, {bon_min}'s below), so a limit "
                     "marked ≥ (≤) is a bound, not an estimate.")
    notes.append(f"≈ Bo-N is BoN-equivalent compute × {int(first['bon_min_n'])} (N of {bon_min}), which assumes "
                 f"Best-of-N's compute grows in proportion to N. Measured compute (× {bon_min}): "
                 f"{first['bon_ladder']}.")
    for _, best in rows[rows["best"] & rows["in_range"]].iterrows():
        by_score, by_compute = best["equivalent_n_by_score"], best["equivalent_n"]
        if np.isfinite(by_score) and abs(by_score / by_compute - 1) > 0.1:
            notes.append(f"Read on the N axis instead (no compute assumption), {best['method_label']} "
                         f"matches ≈ {reference_label(whole(by_score))}, not {reference_label(whole(by_compute))}: Best-of-N's compute is not "
                         "proportional to N here, and the compute figures are the measured ones.")
    return notes


def _global_notes(headline: pd.DataFrame, savings: pd.DataFrame | None, normalization: str,
                  correlation_resamples: int | None, measure: str) -> list[str]:
    notes = []
    if {"confidence_level", "bootstrap_resamples"} <= set(headline.columns) and not headline.empty:
        level, resamples = headline["confidence_level"].iloc[0], int(headline["bootstrap_resamples"].iloc[0])
        notes.append(f"Brackets: {level:.0%} percentile intervals from a prompt-level paired bootstrap "
                     f"({resamples} resamples of the prompts, the same for every configuration of a pair; the "
                     "tokens saved use their own resamples, shared by the settings of a method on a pair). "
                     "Intervals of the BoN-equivalent compute, ≈ Bo-N and the speedup at equal score are over "
                     "every resample; where a setting lands beyond that resample's Best-of-N curve its "
                     "BoN-equivalent is censored at the "
                     "curve's end, which keeps a lower limit conservative (the \"in range\" column gives the "
                     "share of resamples inside).")
    if normalization == "bon_min_range":
        notes.append("Score: the paper's eq. 8 improvement, per prompt "
                     "100 · (1 − (max Z − s) / (max Z − min Z)) with Z the rewards of Bo-N_min's candidates "
                     "(so Bo-N_min scores 100), averaged over prompts.")
    else:
        notes.append(f"Score: improvement under the {normalization!r} normalisation (not the paper's eq. 8).")
    notes.append(f"Compute: {compute_words(measure)[1]}, summed over shards and prompts, relative to Bo-N_min "
                 "(eq. 7). "
                 "BoN-equivalent compute: the Best-of-N compute reaching a setting's score, interpolated linearly "
                 "in log compute between the measured Best-of-N points; above them it is extrapolated from the "
                 "last segment and marked so, never reported as a measurement; below Bo-N_min there is no "
                 "Best-of-N to compare with, and none is given.")
    if "relative_flops" in headline.columns and np.isfinite(headline["relative_flops"].astype(float)).any():
        notes.append("FLOPs: the records' FLOP counts from the models' shapes (every prefill, generated and scored "
                     "token; specrej.records.flops) summed over the prompts, relative to Bo-N_min's — eq. 7 in FLOPs "
                     "instead of seconds, with the same paired resamples; \"--\" where a run has no count.")
    if savings is not None and not savings.empty:
        oracle = ("The oracle bound's interval is the correlation study's own percentile bootstrap"
                  + (f" ({correlation_resamples} resamples)" if correlation_resamples else "") +
                  "; it is measured on the correlation study's candidates, a method's savings on its b_init "
                  "candidates: "
                  "both are shares of the tokens of generating every candidate to completion.")
        notes.append(oracle)
    return notes
