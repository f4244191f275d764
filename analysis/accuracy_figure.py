"""Accuracy against compute (issue 50) as a matplotlib Figure, in the style of Figure 3
(``analysis.figures``): built as a ``Figure``, never through pyplot; ``analysis.figures.save_figure``
writes it.
"""

from collections.abc import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis._columns import require_columns
from analysis.figures import (FIGURE3_COLUMNS, MARKER_SIZE, STYLE, error_bar, place_labels, series_styles,
                              use_plain_log_x)
from analysis.settings import point_label, with_display

ACCURACY_LABEL = "Accuracy (%)"
# x axis: the ratio to SC@reference_n (= Best-of-reference_n's compute) in measured compute or in FLOPs
COMPUTE_AXES = {"work": ("relative_compute", "Compute relative to SC@{n}"),
                "flops": ("relative_flops", "Compute relative to SC@{n} (FLOPs)")}
# The ladders' lines: (colour, line style); "reward" takes the reference method's colour.
LADDER_STYLES = {"vote": ("0.15", "-"), "weighted-vote": ("0.45", "-."), "pass": ("0.65", ":")}


def figure_accuracy_vs_compute(summary: pd.DataFrame, ladder: pd.DataFrame, compute: str = "work",
                               point_rules: Sequence[str] = ("reward",), panel_column: str = "pair",
                               columns: int = FIGURE3_COLUMNS, reference_n: int = 16) -> Figure:
    """Accuracy against compute relative to SC@16 (log x), one panel per ``panel_column`` value.

    ``ladder`` (``analysis.accuracy.vote_ladder``) gives a line per rule, drawn in k order with its
    accuracy interval as bars: BoN@k in the reference method's display colour and marker, SC@k,
    weighted SC@k, and pass@k (the ceiling) in greys.  ``summary``
    (``analysis.accuracy.accuracy_summary``) gives every configuration of every method but the
    reference, under each rule of ``point_rules`` (the first filled, the others hollow), in its
    display colour and marker (``analysis.figures.series_styles``), with bars on both axes and a
    label without what the method's labels share (``point_label``), placed clear of the rest
    (``place_labels``).  ``compute`` "work" reads relative_compute, "flops" relative_flops (both
    relative to SC@``reference_n``, as the tables were made).  Panels
    fill rows of ``columns``, as Figure 3's do; without ``panel_column`` in ``ladder`` there is one.
    """
    x_column, x_label = COMPUTE_AXES[compute]
    require_columns(ladder, ["k", "rule", "accuracy", x_column], "vote ladder")
    require_columns(summary, ["method", "method_label", "rule", "accuracy", x_column], "accuracy summary")
    summary, ladder = with_display(summary), with_display(ladder)
    panels = list(ladder[panel_column].unique()) if panel_column in ladder.columns else [None]
    n_columns = min(len(panels), columns)
    with sns.axes_style(STYLE):
        figure = Figure(figsize=(5.2 * n_columns, 4.4 * -(-len(panels) // n_columns)), layout="constrained")
        grid = figure.subplots(-(-len(panels) // n_columns), n_columns, squeeze=False).ravel()
    for unused in grid[len(panels):]:
        unused.remove()
    labelled = []
    for axes, panel in zip(grid[:len(panels)], panels, strict=True):
        mine = ladder if panel is None else ladder[ladder[panel_column] == panel]
        _draw_ladders(axes, mine, x_column)
        points = summary if panel is None or panel_column not in summary.columns else \
            summary[summary[panel_column] == panel]
        labelled.append((axes, _draw_points(axes, points, summary, x_column, point_rules)))
        use_plain_log_x(axes)
        axes.set_xlabel(x_label.format(n=reference_n))
        axes.set_ylabel(ACCURACY_LABEL)
        if panel is not None:
            axes.set_title(str(panel))
        axes.legend(loc="best", fontsize="small")
    FigureCanvasAgg(figure).draw()  # fixes the layout before the labels are placed, as Figure 3 does
    for axes, points in labelled:
        place_labels(axes, points)
    return figure


def _draw_ladders(axes: Axes, ladder: pd.DataFrame, x_column: str) -> None:
    """One line per rule of the ladder (BoN@k, SC@k, weighted SC@k) and pass@k, k in order."""
    reference = ladder[ladder["reference"]] if ladder["reference"].any() else ladder
    color, marker = (str(reference["color"].iloc[0]), str(reference["marker"].iloc[0])) if len(reference) else \
        ("C0", "o")
    by_rule = {rule: ladder[ladder["rule"] == rule].sort_values("k") for rule in ladder["rule"].unique()}
    if "pass_at_k" in ladder.columns and len(ladder):
        first = next(iter(by_rule.values()))
        by_rule["pass"] = first.assign(accuracy=first["pass_at_k"], **{
            f"accuracy{end}": first[f"pass_at_k{end}"] for end in ("_lo", "_hi") if f"pass_at_k{end}" in first})
    names = {"reward": "BoN@k", "vote": "SC@k", "weighted-vote": "weighted SC@k", "pass": "pass@k (ceiling)"}
    for rule, line in by_rule.items():
        line_color, style = LADDER_STYLES.get(rule, (color, "-"))
        axes.errorbar(line[x_column].to_numpy(dtype=float), line["accuracy"].to_numpy(dtype=float),
                      yerr=error_bar(line, "accuracy"), color=line_color, linestyle=style, marker=marker,
                      markersize=MARKER_SIZE * 0.7, capsize=2, elinewidth=0.8, label=names.get(rule, rule))


def _draw_points(axes: Axes, points: pd.DataFrame, summary: pd.DataFrame, x_column: str,
                 point_rules: Sequence[str]) -> list[tuple[float, float, str, str]]:
    """Every non-reference configuration under each of ``point_rules``; returns the labelled points."""
    labelled = []
    for method, (name, color, marker) in series_styles(summary[~summary["reference"]]).items():
        every = summary.loc[summary["method"] == method, "method_label"].astype(str)
        for position, rule in enumerate(point_rules):
            series = points[(points["method"] == method) & (points["rule"] == rule)].sort_values(x_column)
            if series.empty:
                continue
            x, y = series[x_column].to_numpy(dtype=float), series["accuracy"].to_numpy(dtype=float)
            axes.errorbar(x, y, xerr=error_bar(series, x_column), yerr=error_bar(series, "accuracy"),
                          marker=marker, markersize=MARKER_SIZE, linestyle="none", color=color, capsize=2,
                          elinewidth=0.8, markerfacecolor=color if position == 0 else "none",
                          label=name if len(point_rules) == 1 else f"{name} ({rule})")
            labelled += [(float(a), float(b), point_label(str(label), name, every), color)
                         for a, b, label in zip(x, y, series["method_label"], strict=True)
                         if np.isfinite(a) and a > 0 and np.isfinite(b)]
    return labelled
