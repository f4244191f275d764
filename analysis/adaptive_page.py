"""The adaptive-rejection section of the study's summary (``results/summary.md``): each adaptive
SR run against the fixed-α curve at equal compute, and the survival table of its rounds."""

import numpy as np
import pandas as pd

from analysis.adaptive_study import ADAPTIVE, FIXED_ALPHA
from analysis.page import Block, Bullets, Code, Heading, Paragraph, Strong, Table, text
from analysis.summary_format import bullets, percent, score_text, signed, table, where_on_curve, whole, with_ci
from analysis.tables import format_ratio


def adaptive_section(rows: pd.DataFrame, against: pd.DataFrame, survival: pd.DataFrame,
                      fits: pd.DataFrame) -> list[Block]:
    """Adaptive SR (paper §6) against fixed α: at equal compute on Figure 3, and the best
    response's survival at equal tokens on the correlation study's responses."""
    blocks: list[Block] = [
        Heading(3, text("Adaptive rejection (paper §6)")),
        Paragraph(text("SR with the adaptive rule (", Code("--rejection adaptive"), "): at each decision a row is "
                       "halted when even an optimistic projection of its final reward falls below a pessimistic "
                       "projection of the best row's; δ bounds, per round and under the fitted linear model, the "
                       "chance of halting the row that would have ended best. Its rows in the table above are "
                       "located on the same Best-of-N curve with the same resamples."))]
    items = []
    best = rows[rows["best"] & (rows["method"] == FIXED_ALPHA)]
    for _, row in rows[rows["method"] == ADAPTIVE].iterrows():
        sentence = (f": {with_ci(row, 'improvement', score_text)} at "
                    f"{with_ci(row, 'relative_compute', format_ratio, '×')} compute; speedup at equal score "
                    + (with_ci(row, "compute_speedup", format_ratio, "×") if row["in_range"] else
                       f"not measured ({where_on_curve(row, 'Bo-N_min', 'the largest Best-of-N')})"))
        if not best.empty:
            sentence += (f" (best fixed α, {best['method_label'].iloc[0]}: "
                         f"{with_ci(best.iloc[0], 'improvement', score_text)} at "
                         f"{with_ci(best.iloc[0], 'relative_compute', format_ratio, '×')}, "
                         f"{with_ci(best.iloc[0], 'compute_speedup', format_ratio, '×')})")
        mine = against[against["method_label"] == row["method_label"]] if not against.empty else against
        if not mine.empty:
            sentence += ". " + _against_sentence(mine.iloc[0])
        items.append(text(Strong(str(row["method_label"])), sentence + "."))
    blocks.append(Bullets(tuple(items)))
    if not survival.empty:
        blocks += [Paragraph(text("Does the best response survive the first cuts? On the correlation study's "
                                  "responses, the adaptive rule at each δ against the fixed α that keeps as many rows "
                                  "on average (the same tokens after the decision):")), _survival_table(survival)]
    if not fits.empty:
        fit_text = "; ".join(f"τ={int(f['tau'])}: slope {f['slope']:.2f}, σ {f['sigma']:.3f}, 2σ/slope "
                             f"{f['margin_per_z']:.3f}" for _, f in fits.iterrows())
        fit = (f"Fit (final on partial reward, within prompts; {int(fits['prompts'].max())} held-out prompts, "
               f"not the study's): {fit_text}.")
        blocks.append(bullets([fit]))
    return blocks


def _against_sentence(row: pd.Series) -> str:
    if row["status"] == "inside":
        interval = (f" [{signed(row['gap_lo'])}, {signed(row['gap_hi'])}], inside the fixed-α range in "
                    f"{percent(row['in_range_frac'])} of the resamples" if np.isfinite(row["gap_lo"]) else "")
        side = "above" if row["gap"] > 0 else "below"
        return (f"At its compute the fixed-α curve scores {score_text(row['fixed_alpha_improvement'])}: adaptive is "
                f"{side} it by {signed(row['gap'])}{interval}")
    where = "cheaper than" if row["status"] == "below_range" else "dearer than"
    text = f"It is {where} every fixed α, so no fixed-α score at equal compute is measured"
    if row["dominated_by"]:
        text += f"; dominated by {row['dominated_by']} (at most its compute, higher score)"
    if row["dominates"]:
        text += f"; it dominates {row['dominates']} (at least its compute, lower score)"
    return text


def _survival_table(survival: pd.DataFrame) -> Table:
    cells = []
    for _, row in survival.iterrows():
        cells.append({
            "τ": whole(row["tau"]), "δ": f"{row['delta']:g}",
            "rows kept (adaptive)": f"{percent(row['adaptive_kept_frac'])} ({percent(row['adaptive_kept_frac_min'])}"
                                    f"–{percent(row['adaptive_kept_frac_max'])})",
            "equal α": f"{row['equal_alpha']:.2f}",
            "best kept: adaptive": with_ci(row, "adaptive_best_survives", percent),
            "best kept: fixed α": with_ci(row, "fixed_best_survives", percent),
            "difference (points)": with_ci(row, "survives_difference", lambda v: signed(100 * v)),
        })
    return table("τ", cells)
