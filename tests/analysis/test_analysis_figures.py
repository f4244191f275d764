"""analysis.figures: every figure renders to PNG and PDF with the expected axes."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from analysis.correlation import prompt_tau_statistics
from analysis.figures import (
    figure2_partial_vs_final,
    figure3_compute_vs_improvement,
    figure4_correlation_distributions,
    save_figure,
    zero_spread_note,
)

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(scope="module")
def prefixes() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for prompt_id in ("a", "b", "c"):
        for tau in (8, 32):
            partial = rng.normal(size=25)
            parts.append(pd.DataFrame({
                "prompt_id": prompt_id, "candidate_id": np.arange(25), "tau": tau,
                "partial_score": partial, "final_score": 0.7 * partial + rng.normal(0, 0.5, size=25),
                "num_tokens": rng.integers(4, 120, size=25), "finished_before_tau": False,
            }))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    rows = []
    for pair in ("Gen-A / RM", "Gen-B / RM"):
        for n, compute, improvement in [(8, 1.0, 100.0), (16, 2.0, 130.0), (32, 4.0, 170.0), (64, 8.0, 200.0)]:
            rows.append({"pair": pair, "method": "bon", "n": n, "setting": f'{{"n":{n}}}', "method_label": f"Bo{n}",
                         "relative_compute": compute, "improvement": improvement})
        for alpha, compute, improvement in [(0.5, 1.5, 180.0), (0.9, 0.8, 150.0)]:
            rows.append({"pair": pair, "method": "sr", "n": 64, "setting": f'{{"alpha":{alpha}}}',
                         "method_label": f"SR α={alpha}", "relative_compute": compute, "improvement": improvement})
    return pd.DataFrame(rows)


def with_intervals(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with bootstrap-like intervals and Gen-B's prompts p3 and p7 left out."""
    return summary.assign(
        improvement_lo=summary["improvement"] - 5, improvement_hi=summary["improvement"] + 8,
        relative_compute_lo=summary["relative_compute"] * 0.9, relative_compute_hi=summary["relative_compute"] * 1.2,
        n_prompts=10, n_prompts_improvement=np.where(summary["pair"] == "Gen-B / RM", 8, 10),
        zero_spread_prompts=np.where(summary["pair"] == "Gen-B / RM", "p3,p7", ""),
    )


def assert_saved(figure, tmp_path, stem):
    paths = save_figure(figure, tmp_path / stem)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert paths[0].read_bytes().startswith(b"\x89PNG")
    assert paths[1].read_bytes().startswith(b"%PDF")
    assert all(p.stat().st_size > 1000 for p in paths)


def test_figure2(prefixes, tmp_path):
    figure = figure2_partial_vs_final(prefixes, "b", 32)
    (axes,) = figure.axes
    assert axes.get_xlabel() == "Partial reward (first τ tokens)"
    assert axes.get_ylabel() == "Final reward"
    assert "tokens saved" in axes.get_title()
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert "Best final response" in legend
    assert any(label.startswith("Oracle cutoff") for label in legend)
    assert any(label.startswith("OLS fit") for label in legend)
    assert_saved(figure, tmp_path, "fig2_b_tau_32")


def test_figure2_without_enough_points_for_a_fit(prefixes):
    two = prefixes[(prefixes["prompt_id"] == "a") & (prefixes["tau"] == 8)].head(2)
    (axes,) = figure2_partial_vs_final(two, "a", 8).axes
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert not any(label.startswith("OLS fit") for label in legend)
    assert "Best final response" in legend


def test_figure2_rejects_an_unknown_prompt(prefixes):
    with pytest.raises(ValueError, match="no prefix rows"):
        figure2_partial_vs_final(prefixes, "zzz", 32)


def test_figure3(summary, tmp_path):
    figure = figure3_compute_vs_improvement(summary)
    assert len(figure.axes) == 2
    for axes, pair in zip(figure.axes, ("Gen-A / RM", "Gen-B / RM"), strict=True):
        assert axes.get_title() == pair
        assert axes.get_xscale() == "log"
        assert axes.get_xlabel() == "Relative compute"
        assert axes.get_ylabel() == "Improvement score"
        annotations = {child.get_text() for child in axes.texts}
        assert {"8", "64", "α=0.5", "α=0.9"} <= annotations
    assert_saved(figure, tmp_path, "fig3")


def test_figure3_draws_intervals_on_both_axes_and_names_zero_spread_prompts(summary, tmp_path):
    figure = figure3_compute_vs_improvement(with_intervals(summary))
    for axes in figure.axes:
        bars = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 2  # Best-of-N and Speculative Rejection
        assert all(bar.has_xerr and bar.has_yerr for bar in bars)
    texts = [[t.get_text() for t in axes.texts] for axes in figure.axes]
    assert not any("left out" in t for t in texts[0])
    (note,) = [t for t in texts[1] if "left out" in t]
    assert "p3, p7" in note and "8 of 10 prompts" in note
    assert_saved(figure, tmp_path, "fig3_ci")


def test_zero_spread_note_shortens_long_lists(summary):
    many = with_intervals(summary).assign(zero_spread_prompts=",".join(f"q{i:02d}" for i in range(20)))
    note = zero_spread_note(many, max_named=3)
    assert "q00, q01, q02 and 17 more" in note
    assert zero_spread_note(summary) == ""  # no such columns: nothing to say


DISPLAY = {"bon": ("Best-of-N", "#ff7f0e", "s", True), "sr": ("SR", "#1f77b4", "o", False),
           "sr-adaptive": ("SR adaptive", "#2ca02c", "D", False), "sr-random": ("Random SR", "#d62728", "v", False)}


def displayed(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with the display columns the methods' declarations give (``DISPLAY``)."""
    return summary.assign(**{column: [DISPLAY[m][i] for m in summary["method"]]
                             for i, column in enumerate(("method_name", "color", "marker", "reference"))})


def legend_of(axes) -> list[str]:
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_figure3_draws_adaptive_sr_as_its_own_series(summary):
    one = summary[summary["pair"] == "Gen-A / RM"]
    adaptive = one[one["method"] == "sr"].head(1).assign(method="sr-adaptive", setting='{"alpha":0.5,"delta":0.05}',
                                                          method_label="SR δ=0.05", relative_compute=0.3,
                                                          improvement=111.0)
    (axes,) = figure3_compute_vs_improvement(displayed(pd.concat([one, adaptive]))).axes
    assert legend_of(axes) == ["Best-of-N", "SR", "SR adaptive"]
    annotations = {child.get_text() for child in axes.texts}
    assert "δ=0.05" in annotations and "α=nan" not in annotations
    adaptive_line = axes.get_lines()[-1]
    assert list(adaptive_line.get_xdata()) == [0.3] and list(adaptive_line.get_ydata()) == [111.0]


def test_figure3_has_one_series_per_method_whatever_the_method(summary):
    one = summary[summary["pair"] == "Gen-A / RM"]
    sr = one[one["method"] == "sr"]
    control = sr.assign(method="sr-random", setting=sr["setting"], method_label=["Random SR α=0.5", "Random SR α=0.9"],
                        improvement=[120.0, 110.0])
    other = sr.head(1).assign(method="first-k", setting='{"k":2,"n":3}', method_label="First 2 of 3",
                              relative_compute=0.6, improvement=105.0)
    declared = displayed(pd.concat([one, control]))
    undeclared = other.drop(columns=[c for c in ("method_name", "color", "marker", "reference") if c in other])
    (axes,) = figure3_compute_vs_improvement(pd.concat([undeclared, declared])).axes
    # the reference first, then by method name; a method without a display by its own name
    assert legend_of(axes) == ["Best-of-N", "first-k", "SR", "Random SR"]
    annotations = {child.get_text() for child in axes.texts}
    assert {"8", "64", "α=0.5", "α=0.9", "First 2 of 3"} <= annotations  # the prefix a built-in's labels share goes
    bars = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    first_k = bars[1].lines[0]
    assert list(first_k.get_xdata()) == [0.6] and list(first_k.get_ydata()) == [105.0]
    colors = [bar.lines[0].get_color() for bar in bars]
    assert colors[0] == "#ff7f0e" and colors[2:] == ["#1f77b4", "#d62728"]  # the declared ones
    assert colors[1] not in colors[2:] + colors[:1]  # the fallback palette skips colours declared
    assert [bar.lines[0].get_marker() for bar in bars] == ["s", "o", "o", "v"]


def crowded_summary() -> pd.DataFrame:
    """One panel where settings lie close: α=0.5 and α=0.7 a hair apart, a fourth method among them."""
    rows = [{"method": "bon", "n": n, "setting": f'{{"n":{n}}}', "method_label": f"Bo{n}",
             "relative_compute": c, "improvement": s} for n, c, s in [(8, 1.0, 100.0), (16, 2.0, 130.0),
                                                                      (32, 4.0, 160.0), (64, 8.0, 190.0)]]
    for method, name, points in [("sr", "SR", [(0.5, 1.50, 150.0), (0.7, 1.45, 149.0), (0.9, 1.40, 147.0)]),
                                 ("sr-random", "Random SR", [(0.5, 1.52, 148.0), (0.7, 1.47, 150.5)]),
                                 ("st-bon", "ST-BoN", [(32, 1.48, 151.0), (64, 2.05, 131.0)])]:
        for value, compute, score in points:
            key = "N" if method == "st-bon" else "α"
            rows.append({"method": method, "n": 64, "setting": f'{{"{key}":{value}}}',
                         "method_label": f"{name} {key}={value}", "relative_compute": compute, "improvement": score})
    return pd.DataFrame(rows)


def rendered_overlaps(figure) -> tuple[int, int]:
    """(label pairs whose rendered boxes overlap, labels over a point's marker), measured with the
    figure's renderer."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    (axes,) = figure.axes
    labels = [text.get_window_extent(renderer) for text in axes.texts]
    radius = 3.0 * figure.dpi / 72.0  # half of Figure 3's 6-point markers
    centres = [axes.transData.transform(xy) for line in axes.get_lines() if line.get_marker() not in (None, "None", "")
               for xy in line.get_xydata()]
    pairs = sum(a.overlaps(b) for i, a in enumerate(labels) for b in labels[i + 1:])
    on_points = sum(box.x0 < cx + radius and box.x1 > cx - radius and box.y0 < cy + radius and box.y1 > cy - radius
                    for box in labels for cx, cy in centres)
    return pairs, on_points


def test_figure3_labels_overlap_neither_each_other_nor_a_point_on_a_crowded_panel(tmp_path):
    summary = crowded_summary()
    figure = figure3_compute_vs_improvement(summary)
    (axes,) = figure.axes
    assert len(axes.texts) == len(summary)
    assert rendered_overlaps(figure) == (0, 0)
    figure.set_dpi(200)  # as save_figure writes it: the offsets are in points, the layout is kept
    assert rendered_overlaps(figure) == (0, 0)
    assert_saved(figure, tmp_path, "crowded")
    # the panel is crowded: one fixed offset per label, as before, makes labels collide
    for text in axes.texts:
        text.xyann = (4, -10)
        text.set_horizontalalignment("left")
        text.set_verticalalignment("baseline")
    assert rendered_overlaps(figure)[0] > 0


def test_figure3_label_placement_is_deterministic():
    first, second = (figure3_compute_vs_improvement(crowded_summary()).axes[0] for _ in range(2))
    assert [(t.get_text(), t.xyann) for t in first.texts] == [(t.get_text(), t.xyann) for t in second.texts]


def test_figure3_single_panel_without_pair_column(summary):
    figure = figure3_compute_vs_improvement(summary[summary["pair"] == "Gen-A / RM"].drop(columns="pair"))
    assert len(figure.axes) == 1


def test_figure4(prefixes, tmp_path):
    figure = figure4_correlation_distributions(prompt_tau_statistics(prefixes))
    left, right = figure.axes
    assert left.get_ylabel() == "Pearson $r$" and right.get_ylabel() == r"Kendall $\tau_a$"
    assert left.get_xlabel() == right.get_xlabel() == "τ (generated tokens)"
    assert [tick.get_text() for tick in left.get_xticklabels()] == ["8", "32"]
    assert_saved(figure, tmp_path, "fig4")


def test_figure3_wraps_more_than_three_panels_onto_rows_of_three(summary):
    four = pd.concat([summary.assign(pair=summary["pair"] + suffix) for suffix in ("", " 2")], ignore_index=True)
    figure = figure3_compute_vs_improvement(four)
    assert [axes.get_title() for axes in figure.axes] == ["Gen-A / RM", "Gen-B / RM", "Gen-A / RM 2", "Gen-B / RM 2"]
    places = [(axes.get_subplotspec().rowspan.start, axes.get_subplotspec().colspan.start) for axes in figure.axes]
    assert places == [(0, 0), (0, 1), (0, 2), (1, 0)]  # the fourth starts a row; the row's rest is empty
    assert tuple(figure.get_size_inches()) == pytest.approx((3 * 4.8, 2 * 4.2))


def correlation_statistics(pair: str, pearson: list[float], kendall: list[float]) -> pd.DataFrame:
    """prompt_tau_statistics-shaped rows of one pair: prompts p0, p1, ... at tau 8 and 32 alike."""
    return pd.DataFrame([{"pair": pair, "prompt_id": f"p{i}", "tau": tau, "pearson": r, "kendall": k}
                         for tau in (8, 32) for i, (r, k) in enumerate(zip(pearson, kendall, strict=True))])


def points_of(axes) -> list[float]:
    """The y of every prompt drawn on a Figure 4 panel (the strip plot's points)."""
    return sorted(y for collection in axes.collections for y in collection.get_offsets()[:, 1])


def test_figure4_has_a_row_per_pair_each_with_its_own_prompts(tmp_path):
    statistics = pd.concat([correlation_statistics("SmolLM2 / logprob", [0.1, 0.3, 0.5], [0.0, 0.2, 0.4]),
                            correlation_statistics("Gemma / logprob", [0.9, 0.7], [0.6, 0.8])], ignore_index=True)
    figure = figure4_correlation_distributions(statistics)
    assert len(figure.axes) == 4
    assert [axes.get_title() for axes in figure.axes] == ["SmolLM2 / logprob"] * 2 + ["Gemma / logprob"] * 2
    assert [axes.get_ylabel() for axes in figure.axes] == ["Pearson $r$", r"Kendall $\tau_a$"] * 2
    # each panel holds its pair's prompts at both taus, and only those
    assert points_of(figure.axes[0]) == pytest.approx(sorted([0.1, 0.3, 0.5] * 2))
    assert points_of(figure.axes[1]) == pytest.approx(sorted([0.0, 0.2, 0.4] * 2))
    assert points_of(figure.axes[2]) == pytest.approx([0.7, 0.7, 0.9, 0.9])
    assert points_of(figure.axes[3]) == pytest.approx([0.6, 0.6, 0.8, 0.8])
    assert tuple(figure.get_size_inches()) == pytest.approx((10, 2 * 4.2))
    assert_saved(figure, tmp_path, "fig4_two_pairs")


def test_figure4_with_one_pair_is_the_one_row_figure_without_titles():
    one = correlation_statistics("SmolLM2 / logprob", [0.1, 0.3, 0.5], [0.0, 0.2, 0.4])
    for statistics in (one, one.drop(columns="pair")):
        figure = figure4_correlation_distributions(statistics)
        assert len(figure.axes) == 2 and [axes.get_title() for axes in figure.axes] == ["", ""]
        assert tuple(figure.get_size_inches()) == pytest.approx((10, 4.2))
        assert points_of(figure.axes[0]) == pytest.approx(sorted([0.1, 0.3, 0.5] * 2))


def test_figure3_on_a_flops_axis_plots_the_flops_ratios():
    import pandas as pd

    from analysis.figures import FLOPS_LABEL, figure3_compute_vs_improvement

    summary = pd.DataFrame({"method": ["bon", "bon", "sr"], "method_label": ["Bo16", "Bo32", "SR α=0.5"],
                            "relative_compute": [1.0, 2.0, 1.5], "relative_flops": [1.0, 2.0, 2.6],
                            "relative_flops_lo": [1.0, 2.0, 2.5], "relative_flops_hi": [1.0, 2.0, 2.7],
                            "improvement": [100.0, 108.0, 116.0]})
    axes = figure3_compute_vs_improvement(summary, compute="flops").axes[0]
    assert axes.get_xlabel() == FLOPS_LABEL
    xs = sorted(x for line in axes.get_lines() for x in line.get_xdata())
    assert 2.6 in xs and 1.5 not in xs  # SR at its FLOPs ratio, not its wall-clock one


def test_labels_keep_off_error_bars_caps_and_lines():
    """Hand-made: a point whose horizontal error bar runs right through the first offset tried
    (to the right), a dashed line from it going up-left, and a capped vertical bar: each label
    must cover no segment of any of them, measured independently from the drawn data."""
    from matplotlib.figure import Figure

    from analysis.figures import place_labels

    figure = Figure(figsize=(4, 3))
    axes = figure.subplots()
    axes.set_xlim(0, 10)
    axes.set_ylim(0, 10)
    axes.errorbar([5], [5], xerr=[[3], [4]], yerr=[[2], [2]], marker="o", markersize=6, capsize=3, color="C0")
    axes.plot([5, 1], [5, 9], linestyle="--", color="C0")
    FigureCanvasAgg(figure).draw()
    (label,) = place_labels(axes, [(5.0, 5.0, "α=0.5", "C0")])
    box = label.get_window_extent(figure.canvas.get_renderer())
    to_pixels = axes.transData.transform
    pieces = [((2, 5), (9, 5)), ((5, 3), (5, 7)), ((5, 5), (1, 9))]  # the bars and the line
    for start, end in pieces:
        points = np.linspace(to_pixels(start), to_pixels(end), 400)
        inside = ((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1)
                  & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1))
        assert not inside.any(), (start, end, box)
    # without the bars and the line (the placement that only knew of points), the label sits on
    # the horizontal bar: what this test guards against
    bare = Figure(figsize=(4, 3))
    bare_axes = bare.subplots()
    bare_axes.set_xlim(0, 10)
    bare_axes.set_ylim(0, 10)
    FigureCanvasAgg(bare).draw()
    (naive,) = place_labels(bare_axes, [(5.0, 5.0, "α=0.5", "C0")])
    naive_box = naive.get_window_extent(bare.canvas.get_renderer())
    y = bare_axes.transData.transform((5, 5))[1]
    assert naive_box.y0 <= y <= naive_box.y1 and naive_box.x0 > bare_axes.transData.transform((5, 5))[0]
