"""analysis.tables: layout and the three output formats."""

import math

import pandas as pd
import pytest

from analysis.tables import (
    render_latex,
    render_markdown,
    table1_win_rates,
    table2_perplexity_speedup,
    write_table,
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
                            "perplexity": [3.2, 3.0], "speedup_vs_largest_bon": [1.0, 12.5]})
    table = table2_perplexity_speedup(summary)
    assert table.columns.tolist() == ["G PPL", "G Speedup", "Average PPL", "Average Speedup"]
    assert table.loc["SR α=0.5", "Average Speedup"] == 12.5


def test_markdown_rendering():
    lines = render_markdown(table1_win_rates(WIN_RATES), decimals=1).splitlines()
    assert lines[0] == "| Method | " + " | ".join(TABLE1_COLUMNS) + " |"
    assert lines[1].startswith("| :--- | ---: |")
    assert lines[3] == "| SR α=0.5 | 60.0 | 55.0 | 70.0 | 65.0 | 65.0 | 60.0 |"
    assert len(lines) == 4


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
