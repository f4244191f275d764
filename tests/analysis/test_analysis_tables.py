"""analysis.tables: layout and the three output formats."""

import math

import pandas as pd
import pytest

from analysis.tables import (
    NOT_EVALUATED,
    REFERENCE_NOTE,
    interval_note,
    render_latex,
    render_markdown,
    table1_win_rates,
    table2_perplexity_speedup,
    with_intervals,
    write_table,
    write_table1,
)

pytestmark = pytest.mark.filterwarnings("error")

WIN_RATES = pd.DataFrame(
    {
        "generator": ["Mistral", "Mistral", "Llama", "Llama"],
        "method_label": ["Bo120", "SR α=0.5", "Bo120", "SR α=0.5"],
        "win_rate": [50.0, 60.0, 50.0, 70.0],
        "lc_win_rate": [50.0, 55.0, 50.0, 65.0],
    }
)
TABLE1_COLUMNS = ["Mistral WR", "Mistral LC WR", "Llama WR", "Llama LC WR", "Average WR", "Average LC WR"]


def markdown_cells(markdown: str) -> list[list[str]]:
    """Each line of a pipe table as its cells, without the padding (column widths are cosmetic)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in markdown.splitlines()]


def test_table1_has_a_row_per_method_and_columns_per_generator_plus_average():
    table = table1_win_rates(WIN_RATES)
    assert table.index.tolist() == ["Bo120", "SR α=0.5"]  # input order, not alphabetical
    assert table.columns.tolist() == TABLE1_COLUMNS
    assert table.loc["SR α=0.5", "Llama WR"] == 70.0
    assert table.loc["SR α=0.5", "Average WR"] == 65.0
    assert table.loc["SR α=0.5", "Average LC WR"] == 60.0


def test_average_is_missing_when_a_generator_lacks_the_method():
    table = table1_win_rates(WIN_RATES.iloc[:3])
    assert math.isnan(table.loc["SR α=0.5", "Llama WR"])
    assert math.isnan(table.loc["SR α=0.5", "Average WR"])
    assert table.loc["Bo120", "Average WR"] == 50.0


def test_repeated_generator_and_method_is_an_error():
    with pytest.raises(ValueError):
        table1_win_rates(pd.concat([WIN_RATES, WIN_RATES.iloc[:1]]))


def test_table2_columns():
    summary = pd.DataFrame({"generator": ["G"] * 2, "method_label": ["Bo120", "SR α=0.5"],
                            "perplexity": [3.2, 3.0], "speedup_vs_largest_bon": [1.0, 12.5],
                            "flops_speedup_vs_largest_bon": [1.0, 20.0]})
    table = table2_perplexity_speedup(summary)
    assert table.columns.tolist() == ["G PPL", "G Speedup", "G FLOP speedup", "Average PPL", "Average Speedup",
                                      "Average FLOP speedup"]
    assert table.loc["SR α=0.5", "Average Speedup"] == 12.5 and table.loc["SR α=0.5", "G FLOP speedup"] == 20.0
    # a summary without FLOP counts (older runs) keeps the layout, its FLOP cells missing
    table = table2_perplexity_speedup(summary.drop(columns="flops_speedup_vs_largest_bon"))
    assert "G FLOP speedup" in table.columns and table["G FLOP speedup"].isna().all()


def test_table2_has_a_row_per_setting_of_every_method():
    summary = pd.DataFrame({"generator": ["G"] * 4, "method_label": ["Bo8", "First 2 of 3", "SR α=0.5", "SR δ=0.05"],
                            "perplexity": [3.0, 2.0, 2.5, 2.6], "speedup_vs_largest_bon": [4.0, 2.0, 8.0, 6.0],
                            "flops_speedup_vs_largest_bon": [4.0, 2.5, float("nan"), 5.0]})
    table = table2_perplexity_speedup(summary)
    assert table.index.tolist() == ["Bo8", "First 2 of 3", "SR α=0.5", "SR δ=0.05"]
    assert table.loc["First 2 of 3", ["G Speedup", "G FLOP speedup"]].tolist() == [2.0, 2.5]
    assert r"SR $\delta$=0.05" in render_latex(table) and "δ" not in render_latex(table)


def two_rewards_of_one_generator(silent: pd.DataFrame) -> pd.DataFrame:
    """Table 2's input as workflow/scripts/table2.py builds it for two pairs of one generator, G / R1
    and G / R2: the summary's rows, then a row per method setting that completed no response on any
    prompt of a pair (``silent``: generator, method_label, and pair where given; no metric), then,
    the pairs' rewards being several, each row's generator replaced by its pair."""
    summary = pd.DataFrame({"pair": ["G / R1", "G / R1", "G / R2", "G / R2"], "generator": ["G"] * 4,
                            "reward": ["R1", "R1", "R2", "R2"], "method_label": ["Bo8", "SR α=0.5"] * 2,
                            "perplexity": [3.0, 2.5, 3.1, 2.6], "speedup_vs_largest_bon": [1.0, 6.0, 1.0, 5.0],
                            "flops_speedup_vs_largest_bon": [1.0, 7.0, 1.0, 6.5]})
    rows = pd.concat([summary, silent], ignore_index=True)
    return rows.assign(generator=rows["pair"])


def test_table2_renders_a_method_without_any_response_under_two_rewards_of_one_generator():
    """The study of 2026-12-06: DeepConf completed no response under either reward of G. Its two
    rows name no pair (the workflow gave generator and method only), so both became generator NaN
    and pivot raised "Index contains duplicate entries, cannot reshape": no Table 2 at all."""
    silent = pd.DataFrame({"generator": ["G", "G"], "method_label": ["DeepConf N=8"] * 2})
    for rows in (two_rewards_of_one_generator(silent),  # as the workflow gave them
                 two_rewards_of_one_generator(silent.assign(pair=["G / R1", "G / R2"]))):  # with their pair
        table = table2_perplexity_speedup(rows)
        assert table.index.tolist() == ["Bo8", "SR α=0.5", "DeepConf N=8"]
        assert table.columns.tolist()[:3] == ["G / R1 PPL", "G / R1 Speedup", "G / R1 FLOP speedup"]
        assert table.loc["SR α=0.5", "G / R2 Speedup"] == 5.0 and table.loc["SR α=0.5", "Average PPL"] == 2.55
        assert table.loc["DeepConf N=8"].isna().all()
        assert markdown_cells(render_markdown(table))[-1] == ["DeepConf N=8", *["--"] * 9]


def test_a_method_without_a_response_under_one_reward_keeps_its_values_under_the_other():
    silent = pd.DataFrame({"pair": ["G / R1"], "generator": ["G"], "method_label": ["SR α=0.5"]})
    for rows in (two_rewards_of_one_generator(silent), two_rewards_of_one_generator(silent.drop(columns="pair"))):
        rows = rows.drop(index=1)  # SR α=0.5 answered nothing under R1: the summary has no row of it there
        table = table2_perplexity_speedup(rows)
        assert table.index.tolist() == ["Bo8", "SR α=0.5"]
        assert math.isnan(table.loc["SR α=0.5", "G / R1 PPL"]) and table.loc["SR α=0.5", "G / R2 PPL"] == 2.6
        assert math.isnan(table.loc["SR α=0.5", "Average PPL"])
    # a mark beside a row with values for the same generator × method (one of its runs answered
    # nothing): the values stand; a repeat with values on both rows is still an error
    marked = two_rewards_of_one_generator(silent)
    assert table2_perplexity_speedup(marked).loc["SR α=0.5", "G / R1 PPL"] == 2.5
    with pytest.raises(ValueError, match="duplicate"):
        table2_perplexity_speedup(pd.concat([marked, marked.iloc[[1]]]))


SUMMARY_WITH_CI = pd.DataFrame({
    "generator": ["G", "G", "H", "H"], "method_label": ["Bo120", "SR α=0.5"] * 2,
    "perplexity": [3.2, 3.0, 4.0, 3.5], "perplexity_lo": [3.0, 2.9, 3.8, 3.1], "perplexity_hi": [3.4, 3.2, 4.3, 3.9],
    "speedup_vs_largest_bon": [1.0, 12.5, 1.0, 20.0], "speedup_vs_largest_bon_lo": [1.0, 11.0, 1.0, 18.25],
    "speedup_vs_largest_bon_hi": [1.0, 14.0, 1.0, float("nan")],
})


def test_table2_keeps_interval_ends_as_numbers_beside_each_value():
    table = table2_perplexity_speedup(SUMMARY_WITH_CI)
    assert table.columns.tolist() == [
        "G PPL", "G PPL lo", "G PPL hi", "G Speedup", "G Speedup lo", "G Speedup hi", "G FLOP speedup",
        "H PPL", "H PPL lo", "H PPL hi", "H Speedup", "H Speedup lo", "H Speedup hi", "H FLOP speedup",
        "Average PPL", "Average Speedup", "Average FLOP speedup"]
    assert table.loc["SR α=0.5", "H Speedup lo"] == 18.25
    assert table.loc["SR α=0.5", "Average Speedup"] == 16.25


def test_intervals_are_shown_as_value_lo_hi():
    shown = with_intervals(table2_perplexity_speedup(SUMMARY_WITH_CI), decimals=1)
    assert shown.columns.tolist() == ["G PPL", "G Speedup", "G FLOP speedup", "H PPL", "H Speedup", "H FLOP speedup",
                                      "Average PPL", "Average Speedup", "Average FLOP speedup"]
    assert shown.loc["SR α=0.5", "G PPL"] == "3.0 [2.9, 3.2]"
    assert shown.loc["SR α=0.5", "H Speedup"] == "20.0"  # an interval end is missing: the value alone
    assert shown.loc["SR α=0.5", "Average PPL"] == "3.2"


def test_write_table_with_intervals(tmp_path):
    table = table2_perplexity_speedup(SUMMARY_WITH_CI)
    csv, markdown, latex = write_table(table, tmp_path / "table2")
    pd.testing.assert_frame_equal(pd.read_csv(csv, index_col="Method"), table, check_names=False)
    assert ["SR α=0.5", "3.0 [2.9, 3.2]", "12.5 [11.0, 14.0]", "--", "3.5 [3.1, 3.9]", "20.0", "--", "3.2", "16.2",
            "--"] in markdown_cells(markdown.read_text())
    assert r"SR $\alpha$=0.5 & 3.0 [2.9, 3.2] & 12.5 [11.0, 14.0]" in latex.read_text()
    assert "95% percentile intervals" in interval_note(0.95, 1000) and "1000 resamples" in interval_note(0.95, 1000)


def test_markdown_rendering():
    markdown = render_markdown(table1_win_rates(WIN_RATES), decimals=1)
    lines = markdown_cells(markdown)
    assert all(line.startswith("|") and line.endswith("|") for line in markdown.splitlines())
    assert lines[0] == ["Method", *TABLE1_COLUMNS]
    # the method column left-aligned, the numbers right-aligned
    assert lines[1][0].startswith(":") and not lines[1][0].endswith(":")
    assert all(cell.endswith(":") and not cell.startswith(":") and set(cell) == {"-", ":"} for cell in lines[1][1:])
    assert lines[2] == ["Bo120", "50.0", "50.0", "50.0", "50.0", "50.0", "50.0"]
    assert lines[3] == ["SR α=0.5", "60.0", "55.0", "70.0", "65.0", "65.0", "60.0"]
    assert len(lines) == 4


def test_markdown_keeps_the_decimals_and_shows_missing_values():
    table = pd.DataFrame({"WR": [50.0, math.nan], "n": [3.14159, 12.0]}, index=pd.Index(["Bo4", "SR"], name="Method"))
    assert markdown_cells(render_markdown(table, decimals=2))[2:] == [["Bo4", "50.00", "3.14"], ["SR", "--", "12.00"]]
    assert markdown_cells(render_markdown(table, decimals=0))[2:] == [["Bo4", "50", "3"], ["SR", "--", "12"]]


def test_latex_rendering_escapes_alpha():
    latex = render_latex(table1_win_rates(WIN_RATES), decimals=1)
    assert r"\toprule" in latex and r"\bottomrule" in latex
    assert r"SR $\alpha$=0.5 & 60.0 & 55.0 & 70.0 & 65.0 & 65.0 & 60.0 \\" in latex
    assert "α" not in latex


def test_write_table_writes_all_three_formats(tmp_path):
    table = table1_win_rates(WIN_RATES)
    paths = write_table(table, tmp_path / "out" / "table1")
    assert [p.name for p in paths] == ["table1.csv", "table1.md", "table1.tex"]
    assert all(p.stat().st_size > 0 for p in paths)
    pd.testing.assert_frame_equal(pd.read_csv(paths[0], index_col="Method"), table, check_names=False)


def table1_input_rows(rows):
    columns = ["generator", "method_label", "win_rate", "lc_win_rate", "judge", "reference_label", "note"]
    return pd.DataFrame(rows, columns=columns)


def test_write_table1_marks_each_method_with_its_judge_and_notes(tmp_path):
    inputs = table1_input_rows([
        ["gen", "Bo4", 50.0, 50.0, "longest", "Bo4", REFERENCE_NOTE],
        ["gen", "SR α=0.5", 75.0, 60.0, "longest", "Bo4", "LC-WR unreliable: 8 parsed verdicts (< 20)"],
        ["gen", "Bo16", 62.5, 55.0, "longest", "Bo4", ""],
    ])
    csv, markdown, latex, details = write_table1(inputs, tmp_path / "table1")
    assert details.name == "table1_inputs.csv" and len(pd.read_csv(details)) == 3
    table = pd.read_csv(csv, index_col=0)
    assert table["status"].tolist() == [
        "reference: 50 by definition, not judged",
        "evaluated by longest; LC-WR unreliable: 8 parsed verdicts (< 20)",
        "evaluated by longest",
    ]
    assert table.loc["SR α=0.5", ["gen WR", "gen LC WR"]].tolist() == [75.0, 60.0]
    text = markdown.read_text()
    assert "Judge: longest. WR and LC-WR in percent against Bo4." in text
    assert "- gen / SR α=0.5: LC-WR unreliable: 8 parsed verdicts (< 20)" in text
    assert "by definition" not in text and "**" not in text  # the reference's note is not repeated
    assert "% Judge: longest. WR and LC-WR in percent against Bo4.\n" in latex.read_text()


def test_write_table1_not_evaluated_from_a_csv(tmp_path):
    note = f"{NOT_EVALUATED}: no judge configured"
    inputs = table1_input_rows([["gen", "Bo4", None, None, None, None, note],
                                ["gen", "SR α=0.5", None, None, None, None, note]])
    inputs.to_csv(tmp_path / "win_rates.csv", index=False)  # attrs["status"] does not survive a CSV
    csv, markdown, latex, _ = write_table1(pd.read_csv(tmp_path / "win_rates.csv"), tmp_path / "table1")
    assert pd.read_csv(csv, index_col=0)["status"].tolist() == [note, note]
    text = markdown.read_text()
    assert "Judge: none. WR and LC-WR in percent against Bo-N_min." in text
    assert "**not evaluated: no judge configured**" in text
    assert ["SR α=0.5", "--", "--", "--", "--"] in markdown_cells(text)
    assert "% not evaluated: no judge configured\n" in latex.read_text()
