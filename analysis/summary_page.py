"""The headline page: ``analysis.headline``'s tables as a page of blocks (``analysis.page``), one
page a newcomer reads in a minute. First the headline sentence (per pair, the best setting of the
paper's SR against Best-of-N: its speedup at equal score with its interval), then per pair one
table of every setting (the Best-of-N ladder first, then each method's settings: score, compute,
FLOPs, speedup at equal score), one small table of the tokens saved beside the oracle's, the
adaptive-SR and accuracy sections where the study has them, and the notes, written once for all
settings.  Built once by ``headline_page``, written as Markdown (``results/summary.md``) and as
reStructuredText on the report's front page (``analysis.report_page``).

Every detail the page leaves out (each setting's BoN-equivalent compute and ≈ Bo-N, the share of resamples inside
the curve, the FLOPs speedup, each method's best setting in words, each method's first decision token, b_init and
min_tokens, each setting's notes) is on ``details_page`` (``results/tables/headline.md``, ``metrics/headline.csv``).
Formatting only: every number comes from the inputs; the methods are named by the frames'
columns (``method_label``, ``method_name``, the reference's rows), never here."""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.accuracy_page import accuracy_section
from analysis.adaptive_page import adaptive_section
from analysis.adaptive_study import ADAPTIVE, FIXED_ALPHA
from analysis.headline import PAIR
from analysis.page import Block, Bullets, Heading, Paragraph, Strong, Table, Text, text, to_markdown
from analysis.summary_format import (bullets, compute_measure_of, compute_words, display_name, percent, point_or_ci,
                                     score_text, table, where_on_curve, whole, with_ci)
from analysis.settings import reference_label, with_display
from analysis.tables import MISSING, NO_RESPONSE, format_ratio

SCORE_EQ8 = "eq. 8"


def render_headline_markdown(headline: pd.DataFrame, *args, **kwargs) -> str:
    """``headline_page`` (same arguments) as Markdown."""
    return to_markdown(headline_page(headline, *args, **kwargs))


def headline_page(
    headline: pd.DataFrame,
    savings: pd.DataFrame | None = None,
    normalization: str = "bon_min_range",
    correlation_resamples: int | None = None,
    title: str = "Speculative Rejection vs Best-of-N: headline",
    adaptive: pd.DataFrame | None = None,
    survival: pd.DataFrame | None = None,
    fits: pd.DataFrame | None = None,
    unanswered: pd.DataFrame | None = None,
    accuracy: pd.DataFrame | None = None,
    accuracy_ladder: pd.DataFrame | None = None,
    summary: pd.DataFrame | None = None,
    compute: str | None = None,
    details: str | Sequence[str] | None = None,
    compute_note: str | None = None,
) -> list[Block]:
    """The headline page, in this order:

    1. the headline sentence, per pair (a paragraph for one pair, a bullet each for several):
       the best setting of the first method of ``method_order`` (the paper's SR where the pair
       has it), its speedup at equal score against Best-of-N with its interval, its score and
       compute; or where it lands outside the Best-of-N curve;
    2. per pair (under a heading of its own only with several pairs) one table of every setting:
       the reference's ladder (the reference rows of ``summary``, ``analysis.metrics.method_summary``
       output, when given), then each method's settings in ``method_order`` (its best in bold),
       then the settings in ``unanswered`` (``analysis.tables.unanswered_runs``) that completed no
       response; columns score, compute and FLOPs (× Bo-N_min; FLOPs only with counts) and the
       speedup at equal score, each with its interval where the data has one;
    3. per pair, the tokens saved (``savings``, ``analysis.headline.token_savings``) as one small
       table, a row per setting: its first decision token, the share of Best-of-b_init's tokens it
       saved, and the oracle's share at that token;
    4. adaptive SR against fixed α (``adaptive``, ``survival``, ``fits``: see ``_adaptive_section``)
       and the accuracy on reference answers (``accuracy``, ``accuracy_ladder``:
       ``analysis.accuracy_page.accuracy_section``) where the study has them;
    5. the notes, once for every setting: the score, the compute measure and the speedup (with
       what "above"/"below" the curve means), the intervals, the tokens, the settings that
       completed no response, and where the rest is (``details``: the paths of the detail page
       and the numbers as the reader finds them from this page, e.g. "tables/headline.md").

    ``compute`` names the measure of the compute column (``summary_format.COMPUTE_MEASURES``:
    work, wall, flops, or any other name, read as given); without it the frame's
    ``compute_measure`` column names it, else "work" (``analysis.metrics``' relative_compute);
    ``compute_note`` (its calibration, the measured / modelled check) ends the compute note."""
    measure = compute_measure_of(headline, compute)
    score_name = SCORE_EQ8 if normalization == "bon_min_range" else "improvement, Best-of-N-range normalisation"
    pairs = [(pair, _ordered(rows)) for pair, rows in headline.groupby(PAIR, sort=False)]
    single = len(pairs) == 1
    blocks: list[Block] = [Heading(1, text(title))]
    sentences = [_headline_sentence(rows, str(pair), measure) for pair, rows in pairs]
    if sentences:
        blocks.append(Paragraph(sentences[0]) if single else Bullets(tuple(sentences)))
    # each pair's facts (its prompts, where its token shares come from, its settings without a
    # response): in the notes once where every pair has the same, else under the pair's tables
    facts = {pair: {"prompts": _prompts_clause(rows, score_name), "tokens": _tokens_clause(_of_pair(savings, pair)),
                    "silent": _silent_clause(_of_pair(unanswered, pair))} for pair, rows in pairs}
    shared = {kind: values[0] for kind in ("prompts", "tokens", "silent")
              if len(set(values := [mine[kind] for mine in facts.values()])) == 1
              and (kind != "silent" or single or not values[0])}
    sections = False
    for pair, rows in pairs:
        silent, tokens = _of_pair(unanswered, pair), _of_pair(savings, pair)
        if not single:
            blocks.append(Heading(2, text(str(pair))))
        blocks.append(_settings_table(rows, _reference_of(summary, pair), silent))
        if not tokens.empty:
            blocks.append(_tokens_table(tokens, list(dict.fromkeys(rows["method"]))))
        own = [_sentence("Prompts", facts[pair]["prompts"]) if "prompts" not in shared else "",
               _sentence("Tokens", facts[pair]["tokens"]) if "tokens" not in shared else "",
               facts[pair]["silent"] if "silent" not in shared else ""]
        if any(own):
            blocks.append(bullets([note for note in own if note]))
        if (rows["method"] == ADAPTIVE).any():
            blocks += adaptive_section(rows, *(_of_pair(frame, pair) for frame in (adaptive, survival, fits)))
            sections = True
    if accuracy is not None and not accuracy.empty:
        blocks += accuracy_section(accuracy, accuracy_ladder)
        sections = True
    notes = _footnotes(headline, savings, normalization, correlation_resamples, measure, details, shared)
    notes[1] += f" {compute_note}" if compute_note else ""
    if not single or sections:
        blocks.append(Heading(2, text("Notes")))
    blocks.append(bullets(notes))
    return blocks


def method_order(rows: pd.DataFrame) -> list[str]:
    """The methods of one pair's headline rows as the page shows them: the paper's method (SR at
    a fixed α) first, then the others by the strength of their best setting: those inside the
    Best-of-N curve by speedup at equal score, then the rest by score, a method without a
    finite score last (ties: by name)."""
    def strength(method: str) -> tuple:
        best = rows[(rows["method"] == method) & rows["best"]]
        if method == FIXED_ALPHA:
            return (0, 0.0, method)
        if best.empty or not np.isfinite(best["improvement"].iloc[0]):
            return (3, 0.0, method)
        if bool(best["in_range"].iloc[0]):
            return (1, -float(best["compute_speedup"].iloc[0]), method)
        return (2, -float(best["improvement"].iloc[0]), method)

    return sorted(dict.fromkeys(rows["method"]), key=strength)


def _ordered(rows: pd.DataFrame) -> pd.DataFrame:
    """One pair's headline rows, the methods in ``method_order`` (each method's settings in the
    headline's order)."""
    return pd.concat([rows[rows["method"] == method] for method in method_order(rows)], ignore_index=True)


# --------------------------------------------------------------------------------------
# the headline page (headline_page)
# --------------------------------------------------------------------------------------


def _headline_sentence(rows: pd.DataFrame, pair: str, measure: str) -> Text:
    """The headline: the best setting of the pair's first method (``method_order``) against
    Best-of-N — its speedup at equal score with its interval, its score and compute."""
    mine = rows[rows["method"] == rows["method"].iloc[0]]
    name = display_name(mine.iloc[0])
    bon_min, bon_max = reference_label(mine["bon_min_n"].iloc[0]), reference_label(mine["bon_max_n"].iloc[0])
    bests = mine[mine["best"]]
    if bests.empty:
        return text(f"No setting of {name} has a finite score on {pair}: nothing to compare with Best-of-N.")
    best = bests.iloc[0]
    label, words = Strong(str(best["method_label"])), compute_words(measure)[0]
    at = (f"{with_ci(best, 'improvement', score_text)} at {with_ci(best, 'relative_compute', format_ratio, '×')} "
          f"{bon_min}'s compute")
    if best["in_range"]:
        speedup = with_ci(best, "compute_speedup", format_ratio, "×")
        needs = (f"where Best-of-N needs ≈ {with_ci(best, 'bon_equivalent_compute', format_ratio, '×')} "
                 f"(≈ {reference_label(whole(best['equivalent_n']))})")
        flops = (f"; {with_ci(best, 'flops_speedup', format_ratio, '×')} in FLOPs"
                 if np.isfinite(best.get("flops_speedup", math.nan)) else "")
        if best["compute_speedup"] >= 1:
            unsure = ": its interval holds 1, so no gain is shown" if best.get("compute_speedup_lo", 1) < 1 else ""
            return text(label, f", the best setting of {name} on {pair}, matches Best-of-N's score with ",
                        Strong(f"{speedup} less compute"), f" (the speedup at equal score, in {words}{unsure}"
                        f"{flops}): it scores {at}, {needs}.")
        return text(label, f", the best setting of {name} on {pair}, has a speedup at equal score of only ",
                    Strong(speedup), f" (in {words}{flops}): Best-of-N reaches its score with less compute. It "
                    f"scores {at}, {needs}.")
    low, high = score_text(best["bon_min_improvement"]), score_text(best["bon_max_improvement"])
    opening = text(f"No setting of {name} lands inside the measured Best-of-N curve on {pair} ({bon_min} = {low} "
                   f"to {bon_max} = {high}): its highest-scoring, ", label,
                   f", scores {at}, {where_on_curve(best, bon_min, bon_max)}")
    extrapolated = best["compute_speedup_extrapolated"]
    if best["bon_equivalent_status"] == "above_range" and np.isfinite(extrapolated):
        return text(opening, f"; extending the curve's last segment (extrapolated, not measured) gives a speedup "
                             f"of ≈ {format_ratio(extrapolated)}× ({words}).")
    return text(opening, ".")


def _reference_of(summary: pd.DataFrame | None, pair: str) -> pd.DataFrame:
    """The reference's rows of ``summary`` on ``pair`` (its Best-of-N ladder), by N."""
    mine = _of_pair(summary, pair)
    if mine.empty:
        return mine
    mine = with_display(mine)
    return mine[mine["reference"]].sort_values("n").reset_index(drop=True)


def _settings_table(rows: pd.DataFrame, reference: pd.DataFrame, silent: pd.DataFrame) -> Table:
    """One pair's table: the reference's ladder, then every setting (its method's best in bold),
    then the settings that completed no response."""
    bon_min, bon_max = reference_label(rows["bon_min_n"].iloc[0]), reference_label(rows["bon_max_n"].iloc[0])
    beside = {column: f"{name} (× {bon_min})" for column, name in (("relative_cpu", "measured CPU s"),
                                                                    ("relative_flops", "FLOPs"))
              if any(column in frame.columns and np.isfinite(frame[column].astype(float)).any() and not
                     np.allclose(frame[column].astype(float), frame["relative_compute"].astype(float), equal_nan=True)
                     for frame in (rows, reference))}  # the measured seconds only where eq. 7 counts others

    def cells(label, row: pd.Series, speedup: str) -> dict:
        return {"Setting": label, "score": point_or_ci(row, "improvement", score_text),
                f"compute (× {bon_min})": point_or_ci(row, "relative_compute", format_ratio),
                **{name: point_or_ci(row, column, format_ratio) if column in row.index else MISSING
                   for column, name in beside.items()}, "speedup at equal score": speedup}

    table_rows = [cells(str(row["method_label"]), row, "reference") for _, row in reference.iterrows()]
    for _, row in rows.iterrows():
        label = text(Strong(str(row["method_label"])), " (best)") if row["best"] else str(row["method_label"])
        table_rows.append(cells(label, row, _speedup_cell(row, bon_min, bon_max)))
    for label in ([] if silent.empty else silent["method_label"]):
        table_rows.append({column: MISSING for column in table_rows[0]} | {"Setting": str(label), "score": NO_RESPONSE})
    return table("Setting", table_rows)


def _speedup_cell(row: pd.Series, bon_min: str, bon_max: str) -> str:
    """The speedup at equal score with its interval; outside the curve, where the setting lands
    (above it with the extrapolated speedup, marked so)."""
    if row["in_range"]:
        return with_ci(row, "compute_speedup", format_ratio)
    status = row["bon_equivalent_status"]
    if status == "above_range":
        extrapolated = row["compute_speedup_extrapolated"]
        return f"above {bon_max}" + (f": ≈ {format_ratio(extrapolated)} (extrapolated)" if np.isfinite(extrapolated)
                                     else "")
    if status == "below_range":
        return f"below {bon_min}"
    return MISSING


def _tokens_table(savings: pd.DataFrame, order: list[str]) -> Table:
    """One pair's tokens: per setting its first decision token, the share of Best-of-b_init's
    tokens it saved, and the oracle's share at that token."""
    rows = []
    for method in [*order, *(m for m in dict.fromkeys(savings["method"]) if m not in order)]:
        for _, row in savings[savings["method"] == method].iterrows():
            token = row["first_decision_token"]
            low, high = row["first_decision_token_min"], row["first_decision_token_max"]
            first = MISSING
            if np.isfinite(token):
                first = whole(token) + (f" ({whole(low)}–{whole(high)})" if low != high else "")
                first += " (min_tokens)" if row["decision_token_source"] == "min_tokens" else ""
            saved = with_ci(row, "tokens_saved_frac", percent)
            if saved != MISSING and np.isfinite(row["init_batch_size"]):
                saved += f" of {reference_label(whole(row['init_batch_size']))}"
            oracle = with_ci(row, "oracle_tokens_saved_frac", percent)
            if oracle != MISSING and not row["oracle_tau_exact"]:
                oracle += f" (τ = {whole(row['oracle_tau'])})"
            rows.append({"Setting": str(row["method_label"]), "first cut at token": first, "tokens saved": saved,
                         "oracle at that token": oracle})
    return table("Setting", rows)


def _sentence(name: str, clause: str) -> str:
    return f"{name}: {clause}." if clause else ""


def _prompts_clause(rows: pd.DataFrame, score_name: str) -> str:
    """The prompts behind one pair's scores: "eq. 8 on 19 of the 20 prompts ...", "" without counts."""
    first = rows.iloc[0]
    if "n_prompts" not in rows.columns or not np.isfinite(float(first["n_prompts"])):
        return ""
    answered = int(first["n_prompts"])
    defined = first.get("n_prompts_improvement", math.nan)
    clause = (f"{score_name} on {int(defined)} of the {answered} prompts answered by every configuration"
              if np.isfinite(float(defined)) and int(defined) != answered
              else f"the {answered} prompts answered by every configuration")
    zero = first.get("zero_spread_prompts", "")
    if isinstance(zero, str) and zero:
        clause += (f"; left out as zero-spread ({reference_label(first['bon_min_n'])}'s rewards all equal): "
                   f"{zero.replace(',', ', ')}")
    return clause


def _tokens_clause(savings: pd.DataFrame) -> str:
    """Where one pair's token shares come from: the response length's Best-of-N, the prompts, the
    oracle's prompts (or why there is no oracle)."""
    if savings.empty:
        return ""
    lengths = ", ".join(reference_label(whole(n)) for n in dict.fromkeys(savings["reference_bon_n"]) if np.isfinite(n))
    clause = (f"mean response length from {lengths or 'the largest Best-of-N'}'s candidates, "
              f"{_counts(savings['n_prompts'])} prompts")
    if not any(savings["correlation_taus"].astype(str).str.len() > 0):
        return clause + "; no correlation study covers this pair, so there is no oracle"
    oracle = savings["oracle_n_prompts"].astype(float)
    clause += f"; the oracle on the correlation study's {_counts(oracle[np.isfinite(oracle)])} prompts"
    if not savings.loc[np.isfinite(savings["oracle_tau"].astype(float)), "oracle_tau_exact"].all():
        clause += (f" (it scored τ = {savings['correlation_taus'].iloc[0]} only: a first cut at another token "
                   "reads the nearest, named in the cell)")
    return clause


def _counts(values: pd.Series) -> str:
    """"24", or "22–24" where the counts differ."""
    values = [int(value) for value in values if np.isfinite(float(value))]
    if not values:
        return MISSING
    return str(values[0]) if min(values) == max(values) else f"{min(values)}–{max(values)}"


def _silent_clause(silent: pd.DataFrame) -> str:
    """The settings that completed no response, in one sentence."""
    if silent.empty:
        return ""
    named = "; ".join(f"{row.method_label} ({row.error})" for row in silent.itertuples())
    one = len(silent) == 1
    return (f"No response on any prompt: {named}. {'It has' if one else 'They have'} no score and "
            f"{'leaves' if one else 'leave'} out no prompt of the other methods.")


def _footnotes(headline: pd.DataFrame, savings: pd.DataFrame | None, normalization: str,
               correlation_resamples: int | None, measure: str, details: str | Sequence[str] | None,
               facts: dict[str, str] | None) -> list[str]:
    """The page's notes, once for every setting; ``facts``: the prompts, the tokens' sources and the
    settings without a response that every pair shares, folded in."""
    facts = facts or {}
    notes = []
    prompts = f" ({facts['prompts']})" if facts.get("prompts") else ""
    if normalization == "bon_min_range":
        notes.append("Score: the paper's eq. 8 improvement, per prompt 100 · (1 − (max Z − s) / (max Z − min Z)) with "
                     "Z the rewards of Bo-N_min's candidates (so Bo-N_min scores 100), averaged over the prompts"
                     f"{prompts}.")
    else:
        notes.append(f"Score: improvement under the {normalization!r} normalisation (not the paper's eq. 8), averaged "
                     f"over the prompts{prompts}.")
    flops = "relative_flops" in headline.columns and np.isfinite(headline["relative_flops"].astype(float)).any()
    compute = (f"Compute: {compute_words(measure)[1]}, summed over shards and prompts, relative to Bo-N_min (eq. 7)"
               + ("; FLOPs: the records' FLOP counts from the models' shapes, relative to Bo-N_min's (\"--\" without a "
                  "count)" if flops else "") + ". ")
    speedup = ("Speedup at equal score: the Best-of-N compute that reaches the setting's score (interpolated in log "
               "compute between the measured Best-of-N points) over the setting's; in bold, each method's best: its "
               "largest speedup inside the curve, else its highest score.")
    notes.append(compute + speedup + _outside_note(headline))
    if ({"confidence_level", "bootstrap_resamples"} <= set(headline.columns) and not headline.empty
            and int(headline["bootstrap_resamples"].iloc[0]) > 0):
        level, resamples = headline["confidence_level"].iloc[0], int(headline["bootstrap_resamples"].iloc[0])
        oracle = (f"; the oracle's, the correlation study's own"
                  + (f" ({correlation_resamples} resamples)" if correlation_resamples else "")
                  if savings is not None and not savings.empty else "")
        notes.append(f"Brackets: {level:.0%} percentile intervals from a prompt-level paired bootstrap ({resamples} "
                     "resamples, the same for every configuration of a pair; the tokens saved use their own, shared by "
                     f"a method's settings{oracle}). A limit marked ≥ (≤) is a bound: in some resamples the setting "
                     "lands beyond the Best-of-N curve, where its Best-of-N equivalent is censored at the curve's end.")
    if savings is not None and not savings.empty:
        where = f" ({facts['tokens']})" if facts.get("tokens") else ""
        stand_in = ("; \"(min_tokens)\": rounds not recorded, the setting's min_tokens stands in"
                    if (savings["decision_token_source"] == "min_tokens").any() else "")
        notes.append("Tokens: the first cut is the token of a setting's first rejection (the most common over the "
                     f"prompts, their range beside it{stand_in}); tokens saved, the share of the tokens "
                     "Best-of-b_init (b_init: the setting's first batch, named in the cell) would generate running every candidate to "
                     "completion on the same prompts; the oracle's, the share saved by stopping at that token every "
                     f"candidate that will not end best, measured on the correlation study's candidates{where}.")
    if facts.get("silent"):
        notes.append(facts["silent"])
    if details:
        notes.append("Every setting in full — its Best-of-N equivalent (≈ Bo-N), the share of resamples inside the "
                     "curve, the FLOPs speedup, each method's best in words, b_init and min_tokens: "
                     f"{', '.join([details] if isinstance(details, str) else details)}.")
    return notes


def _outside_note(headline: pd.DataFrame) -> str:
    """What the speedup cells of settings outside the Best-of-N curve say, once."""
    if headline.empty:
        return ""
    status = set(headline.loc[~headline["in_range"].astype(bool), "bon_equivalent_status"])
    labels = {kind: sorted({reference_label(n) for n in headline[f"bon_{kind}_n"]}) for kind in ("min", "max")}
    low = labels["min"][0] if len(labels["min"]) == 1 else "Bo-N_min"
    high = labels["max"][0] if len(labels["max"]) == 1 else "Bo-N_max"
    parts = []
    if "above_range" in status:
        parts.append(f"\"above {high}: ≈ x (extrapolated)\": the setting scores above the largest Best-of-N, so no "
                     "speedup is measured; x extends the curve's last segment, an extrapolation, not a measurement")
    if "below_range" in status:
        parts.append(f"\"below {low}\": it scores below the cheapest Best-of-N, so there is none to compare with")
    return (" " + "; ".join(parts) + ".") if parts else ""


# --------------------------------------------------------------------------------------
# the detail page (details_page), and the adaptive section of the headline page
# --------------------------------------------------------------------------------------


def _of_pair(frame: pd.DataFrame | None, pair: str) -> pd.DataFrame:
    if frame is None or frame.empty or PAIR not in frame.columns:
        return pd.DataFrame()
    return frame[frame[PAIR] == pair].reset_index(drop=True)


