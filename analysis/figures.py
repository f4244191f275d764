"""The paper's Figures 2–4 as matplotlib Figures.

Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot: nothing
opens a window or piles up in pyplot's list of open figures, and saving renders with Agg
(PNG) and the PDF backend whatever the session's default backend is.  Each function returns its Figure;
``save_figure`` writes it.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import Bbox

from analysis._columns import require_columns
from analysis.correlation import PREFIX_COLUMNS, group_statistics, ols_band
from analysis.settings import configuration_order, point_label, with_display

STYLE = "whitegrid"
BOX_COLOR, BEST_COLOR = "#66c2a5", "red"
# Figure 3's point labels: the offsets (points) tried around each point, nearest ring first, and
# the marker size (points) a label keeps clear of.
LABEL_RADII = (5.0, 10.0, 16.0, 24.0)
LABEL_DIRECTIONS = 16
MARKER_SIZE = 6.0
PARTIAL_LABEL, FINAL_LABEL = "Partial reward (first τ tokens)", "Final reward"
COMPUTE_LABEL, IMPROVEMENT_LABEL = "Relative compute", "Improvement score"
FLOPS_LABEL, WALL_LABEL = "Relative compute (FLOPs)", "Relative compute (wall-clock)"
# Figure 3's x axis: eq. 7's compute modelled from the records' steps on the machine's calibration,
# or measured (CPU or device seconds of the work), or the same ratio in wall-clock seconds, or in
# counted FLOPs
FIGURE3_COMPUTE = {"modelled": ("relative_compute", "Relative compute (steps x calibration)"),
                   "work": ("relative_compute", COMPUTE_LABEL), "wall": ("relative_wall", WALL_LABEL),
                   "flops": ("relative_flops", FLOPS_LABEL)}
TAU_LABEL = "τ (generated tokens)"
CORRELATION_LABELS = {"pearson": "Pearson $r$", "kendall": r"Kendall $\tau_a$"}
# Zero-spread prompts named in a Figure 3 panel's footnote before "and k more".
MAX_NAMED_PROMPTS = 12
# Figure 3's panels per row: the paper's grid is 3 reward models wide; more pairs wrap onto new rows.
FIGURE3_COLUMNS = 3


def save_figure(figure: Figure, path_stem: str | Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``figure`` as ``<path_stem>.png`` and ``<path_stem>.pdf``; returns the paths.

    The suffix is appended rather than substituted, so stems such as ``fig2_tau_0.5`` survive.
    """
    paths = [Path(f"{path_stem}.{extension}") for extension in formats]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=200, bbox_inches="tight")
    return paths


def figure2_partial_vs_final(
    prefixes: pd.DataFrame, prompt_id, tau: int, confidence_level: float = 0.95
) -> Figure:
    """Figure 2: partial vs final reward of one prompt's candidates at one ``tau``.

    Input: the prefix table (see ``analysis.correlation``).  Draws the candidates, the OLS
    line of final on partial with its ``confidence_level`` band, the best final response in
    red and the oracle cutoff c* as a dashed vertical line; the title gives the share of
    tokens an oracle early stop at c* would save.
    """
    require_columns(prefixes, PREFIX_COLUMNS, "prefix table")
    group = prefixes[(prefixes["prompt_id"] == prompt_id) & (prefixes["tau"] == tau)]
    if group.empty:
        raise ValueError(f"no prefix rows for prompt {prompt_id!r} at tau={tau}")
    summary = group_statistics(group, alphas=())
    partial = group["partial_score"].to_numpy(dtype=float)
    final = group["final_score"].to_numpy(dtype=float)
    is_best = final == final.max()

    with sns.axes_style(STYLE):
        figure = Figure(figsize=(5.5, 4.5), layout="constrained")
        axes = figure.add_subplot()
    _draw_ols_band(axes, partial, final, confidence_level, summary["pearson"])
    axes.scatter(partial[~is_best], final[~is_best], s=18, color="0.35", alpha=0.7, label="Responses")
    axes.scatter(partial[is_best], final[is_best], s=45, color=BEST_COLOR, zorder=3, label="Best final response")
    axes.axvline(summary["oracle_cutoff"], color="0.15", linestyle="--",
                 label=f"Oracle cutoff c* = {summary['oracle_cutoff']:.2f}")
    axes.set_xlabel(PARTIAL_LABEL)
    axes.set_ylabel(FINAL_LABEL)
    axes.set_title(f"Prompt {prompt_id}, τ = {tau}: {summary['tokens_saved_frac']:.1%} of tokens saved")
    axes.legend(fontsize="small", loc="best")
    return figure


def figure3_compute_vs_improvement(summary: pd.DataFrame, panel_column: str = "pair",
                                   columns: int = FIGURE3_COLUMNS, compute: str = "work") -> Figure:
    """Figure 3: relative compute (log x) vs improvement score, one panel per ``panel_column``.
    ``compute`` "work" is eq. 7's measured compute (relative_compute: CPU or device seconds of
    the work, ``analysis.metrics``' work_s), "wall" the same ratio in wall-clock seconds
    (relative_wall), "flops" in counted FLOPs (relative_flops); each with its _lo/_hi as its bars.

    Input: ``analysis.metrics.method_summary`` output, i.e. columns method, method_label,
    relative_compute, improvement (and n, Best-of-N's N), and ``panel_column`` (e.g. ``pair`` =
    generator / reward) if there is more than one panel; without that column everything goes in
    one panel.  One series per method, drawn as its display (method_name, color, marker,
    reference: ``analysis.settings.with_display``): the reference method's ladder first, then
    every other method in order of its name, each point labelled by its setting without what the
    method's labels share (``point_label``: "α=0.5", "16", or a whole label such as "First 2 of
    3").  The labels are placed so that none overlaps another or a point (``place_labels``).
    With the columns improvement_lo/hi and relative_compute_lo/hi every point gets error bars on
    both axes (the bootstrap intervals); with n_prompts_improvement and zero_spread_prompts a
    panel whose improvement leaves out prompts (Bo-N_min's rewards did not spread) names them
    under its axes. The panels, in order of first appearance, fill rows of ``columns`` (a grid
    like the paper's); up to ``columns`` panels make one row.
    """
    x_column, x_label = FIGURE3_COMPUTE[compute]
    require_columns(summary, ["method", "method_label", x_column, "improvement"], "method summary")
    if compute != "work":  # the curves read relative_compute(_lo/_hi): give them the chosen ratio
        summary = summary.assign(**{f"relative_compute{end}": summary[f"{x_column}{end}"]
                                    for end in ("", "_lo", "_hi") if f"{x_column}{end}" in summary.columns})
    summary = with_display(summary)
    panels = summary[panel_column].unique() if panel_column in summary.columns else [None]
    styles = series_styles(summary)
    n_columns = min(len(panels), columns)
    n_rows = -(-len(panels) // n_columns)
    with sns.axes_style(STYLE):
        figure = Figure(figsize=(4.8 * n_columns, 4.2 * n_rows), layout="constrained")
        grid = figure.subplots(n_rows, n_columns, squeeze=False).ravel()
    for unused in grid[len(panels):]:  # the last row's empty places
        unused.remove()
    labelled = []
    for axes, panel in zip(grid[:len(panels)], panels, strict=True):
        points = summary if panel is None else summary[summary[panel_column] == panel]
        mine = []
        for method, (name, color, marker) in styles.items():
            series = points[points["method"] == method].sort_values("relative_compute")
            every = summary.loc[summary["method"] == method, "method_label"].astype(str)
            labels = [point_label(str(label), name, every) for label in series["method_label"]]
            mine += _draw_labelled_curve(axes, series, name, color, labels, marker=marker)
        labelled.append((axes, mine))
        use_plain_log_x(axes)
        axes.set_xlabel(x_label)
        axes.set_ylabel(IMPROVEMENT_LABEL)
        if panel is not None:
            axes.set_title(str(panel))
        axes.legend(loc="lower right", fontsize="small")
        note = zero_spread_note(points)
        if note:
            axes.text(0.0, -0.16, note, transform=axes.transAxes, va="top", fontsize="x-small", wrap=True)
    FigureCanvasAgg(figure).draw()  # fixes the layout: the labels stay out of it, so it holds when saved
    for axes, points in labelled:
        place_labels(axes, points)
    return figure


def series_styles(summary: pd.DataFrame) -> dict[str, tuple[str, str, str]]:
    """{method: (display name, colour, marker)} in Figure 3's order: the reference method first,
    then by method name (``analysis.settings.configuration_order``)."""
    summary = with_display(summary)
    first = summary.drop_duplicates("method")
    ordered = sorted(first.itertuples(index=False), key=lambda row: configuration_order(
        bool(row.reference), str(row.method), 0, "", "")[:2])
    return {row.method: (str(row.method_name), str(row.color), str(row.marker)) for row in ordered}


def place_labels(axes: Axes, points: Sequence[tuple[float, float, str, str]],
                 fontsize: str = "x-small") -> list[Annotation]:
    """Label each (x, y, text, colour) point of ``axes`` where its rendered text overlaps no label placed
    before it, no point, and none of what is drawn on the axes (``drawn_obstacles``: every line
    segment, error bar and cap): the offsets of ``LABEL_RADII`` × ``LABEL_DIRECTIONS`` directions
    (nearest ring first, starting to the right and going anticlockwise) are tried in turn, each
    measured with the figure's renderer, and the first that is clear and inside the axes wins;
    when none is, the one overlapping least.  Deterministic: the points are labelled in the
    order given.  Call it after the figure's layout is fixed (the offsets are in points, so they
    keep their shape when the figure is saved at another resolution)."""
    figure = axes.get_figure(root=True)
    renderer = figure.canvas.get_renderer()
    scale = figure.dpi / 72.0
    radius = MARKER_SIZE / 2.0 * scale + 1.0
    centres = [axes.transData.transform((x, y)) for x, y, _, _ in points]
    markers = [Bbox.from_extents(cx - radius, cy - radius, cx + radius, cy + radius) for cx, cy in centres]
    boxes, segments = drawn_obstacles(axes)
    frame = axes.get_window_extent(renderer)
    offsets = [(r * np.cos(a), r * np.sin(a)) for r in LABEL_RADII
               for a in np.linspace(0.0, 2.0 * np.pi, LABEL_DIRECTIONS, endpoint=False)]
    placed, annotations = [], []
    for x, y, text, color in points:
        annotation = axes.annotate(text, (x, y), textcoords="offset points", fontsize=fontsize, xytext=(0, 0),
                                   color=color)
        annotation.set_in_layout(False)
        best, best_cost = None, np.inf
        for dx, dy in offsets:
            _aim(annotation, dx, dy)
            box = annotation.get_window_extent(renderer)
            cost = sum(_overlap(box, other) for other in placed + markers + boxes)
            cost += sum(_length_inside(box, *segment) * width for *segment, width in segments)
            cost += 0.0 if _inside(box, frame) else box.width * box.height
            if cost < best_cost:
                best, best_cost = (dx, dy), cost
            if cost == 0.0:
                break
        _aim(annotation, *best)
        placed.append(annotation.get_window_extent(renderer))
        annotations.append(annotation)
    return annotations


def drawn_obstacles(axes: Axes) -> tuple[list[Bbox], list[tuple[np.ndarray, np.ndarray, float]]]:
    """What a label must not cover, in display coordinates: a box around every marker of the
    axes' lines (points and error-bar caps), and every segment of their lines and of their line
    collections (error bars), each as (start, end, width in pixels, at least 2)."""
    scale = axes.get_figure(root=True).dpi / 72.0
    boxes, segments = [], []
    for line in axes.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if line.get_marker() not in (None, "None", "", " "):
            half = line.get_markersize() * scale / 2.0 + 1.0
            boxes += [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in xy]
        if line.get_linestyle() not in ("None", "", " ") and len(xy) > 1:
            width = max(2.0, line.get_linewidth() * scale)
            segments += [(a, b, width) for a, b in zip(xy[:-1], xy[1:])]
    for collection in axes.collections:
        if not (collection.get_visible() and hasattr(collection, "get_segments")):
            continue
        width = max(2.0, float(np.max(collection.get_linewidths(), initial=1.0)) * scale)
        transform = collection.get_transform()
        for path in collection.get_segments():
            xy = transform.transform(np.asarray(path, dtype=float))
            segments += [(a, b, width) for a, b in zip(xy[:-1], xy[1:]) if np.isfinite([*a, *b]).all()]
    return boxes, segments


def _length_inside(box: Bbox, start: np.ndarray, end: np.ndarray) -> float:
    """The length of the segment start-end that lies inside ``box`` (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = start, end
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for step, room in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if step == 0:
            if room < 0:
                return 0.0
            continue
        t = room / step
        if step < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return 0.0
    return (high - low) * float(np.hypot(dx, dy))


def _aim(annotation: Annotation, dx: float, dy: float) -> None:
    """Offset ``annotation`` by (dx, dy) points, its text on the far side of the offset."""
    annotation.xyann = (dx, dy)
    tolerance = 1e-9
    annotation.set_horizontalalignment("left" if dx > tolerance else "right" if dx < -tolerance else "center")
    annotation.set_verticalalignment("bottom" if dy > tolerance else "top" if dy < -tolerance else "center")


def _overlap(a: Bbox, b: Bbox) -> float:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width * height if width > 0 and height > 0 else 0.0


def _inside(box: Bbox, frame: Bbox) -> bool:
    return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1


def zero_spread_note(summary: pd.DataFrame, max_named: int = MAX_NAMED_PROMPTS) -> str:
    """The sentence naming the prompts left out of one group's improvement score ("" if none).

    Eq. 8 divides by Bo-N_min's reward range on the prompt, so a prompt whose Bo-N_min
    candidates all scored the same (or whose range is unknown) has no improvement score.
    """
    if not {"zero_spread_prompts", "n_prompts_improvement", "n_prompts"} <= set(summary.columns):
        return ""
    names = sorted({name for cell in summary["zero_spread_prompts"].dropna().astype(str)
                    for name in cell.split(",") if name})
    if not names:
        return ""
    shown = ", ".join(names[:max_named]) + (f" and {len(names) - max_named} more" if len(names) > max_named else "")
    used, total = int(summary["n_prompts_improvement"].min()), int(summary["n_prompts"].max())
    return (f"Improvement over {used} of {total} prompts; left out, as Bo-N_min's rewards did not "
            f"spread: {shown}.")


def figure4_correlation_distributions(statistics: pd.DataFrame, panel_column: str = "pair") -> Figure:
    """Figure 4: distribution across prompts of Pearson r (left) and Kendall τ_a (right) per tau.

    Input: ``analysis.correlation.prompt_tau_statistics`` output (columns tau, pearson,
    kendall — tau-a, the paper's Appendix B definition).  Each tau gets a box plot with the
    individual prompts overlaid; degenerate prompts (NaN) are left out.  With a ``panel_column``
    (e.g. ``pair``) holding several values, each gets a row of the two panels, titled by it, in
    order of first appearance; with one value, or without the column, the figure is one row,
    untitled (the caller may title it).
    """
    require_columns(statistics, ["tau", *CORRELATION_LABELS], "prompt/tau statistics")
    panels = statistics[panel_column].unique() if panel_column in statistics.columns else [None]
    with sns.axes_style(STYLE):
        figure = Figure(figsize=(10, 4.2 * len(panels)), layout="constrained")
        rows = figure.subplots(len(panels), 2, squeeze=False)
    for row, panel in zip(rows, panels, strict=True):
        rows_of_panel = statistics if panel is None else statistics[statistics[panel_column] == panel]
        for axes, (metric, label) in zip(row, CORRELATION_LABELS.items(), strict=True):
            values = rows_of_panel.dropna(subset=[metric])
            if values.empty:
                axes.text(0.5, 0.5, "no prompt with enough variation", ha="center", transform=axes.transAxes)
            else:
                _draw_boxes_with_points(axes, values, metric)
            axes.axhline(0.0, color="0.5", linewidth=0.8)
            axes.set_xlabel(TAU_LABEL)
            axes.set_ylabel(label)
            if len(panels) > 1:
                axes.set_title(str(panel))
    return figure


def _draw_boxes_with_points(axes: Axes, values: pd.DataFrame, metric: str) -> None:
    """One box per tau at categorical positions 0..k-1, the prompts jittered on top.

    The boxes come from matplotlib itself: seaborn 0.13's boxplot passes the ``vert``
    argument that Matplotlib 3.11 deprecated.
    """
    taus = sorted(values["tau"].unique())
    axes.boxplot(
        [values.loc[values["tau"] == tau, metric] for tau in taus],
        positions=range(len(taus)),
        widths=0.6,
        showfliers=False,  # every prompt is drawn as a point anyway
        patch_artist=True,
        boxprops={"facecolor": BOX_COLOR, "alpha": 0.6},
        medianprops={"color": "0.1"},
        manage_ticks=False,
    )
    sns.stripplot(data=values, x="tau", y=metric, order=taus, ax=axes, color="0.25", size=3, alpha=0.6, jitter=0.2)


def error_bar(points: pd.DataFrame, column: str) -> np.ndarray | None:
    """(2, n) distances from each point to its <column>_lo / _hi interval ends, None without them.

    Clipped at 0: a percentile interval need not contain the point estimate, and matplotlib
    rejects negative lengths; a missing end draws no bar on that side.
    """
    if not {f"{column}_lo", f"{column}_hi"} <= set(points.columns):
        return None
    value = points[column].to_numpy(dtype=float)
    lengths = np.stack([value - points[f"{column}_lo"].to_numpy(dtype=float),
                        points[f"{column}_hi"].to_numpy(dtype=float) - value])
    return np.clip(np.nan_to_num(lengths, nan=0.0), 0.0, None)


def use_plain_log_x(axes: Axes) -> None:
    """Log-scaled x ticked at powers of two and written 0.5, 1, 2, …, as compute ratios are read."""
    axes.set_xscale("log", base=2)
    axis = axes.xaxis
    axis.set_major_locator(LogLocator(base=2))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _draw_ols_band(axes: Axes, partial: np.ndarray, final: np.ndarray, confidence_level: float, pearson: float) -> None:
    band = ols_band(partial, final, confidence_level=confidence_level)
    if band.empty:  # too few or constant points: nothing to fit
        return
    axes.fill_between(band["partial_score"], band["ci_low"], band["ci_high"], color="C0", alpha=0.2,
                      label=f"{confidence_level:.0%} confidence band")
    axes.plot(band["partial_score"], band["fit"], color="C0", label=f"OLS fit (r = {pearson:.2f})")


def _draw_labelled_curve(axes: Axes, points: pd.DataFrame, name: str, color: str, labels: list[str],
                         marker: str = "o") -> list[tuple[float, float, str, str]]:
    """Draw one series; returns its finite points with their labels, for ``place_labels``."""
    if points.empty:
        return []
    x, y = points["relative_compute"].to_numpy(dtype=float), points["improvement"].to_numpy(dtype=float)
    axes.errorbar(x, y, xerr=error_bar(points, "relative_compute"), yerr=error_bar(points, "improvement"),
                  marker=marker, markersize=MARKER_SIZE, linestyle="--", color=color, label=name, capsize=2,
                  elinewidth=0.8)
    return [(float(a), float(b), label, color) for a, b, label in zip(x, y, labels, strict=True)
            if np.isfinite(a) and a > 0 and np.isfinite(b)]
