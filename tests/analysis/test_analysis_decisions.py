"""analysis.decisions: each setting's decisions summarised over prompts."""

import pytest

from analysis.decisions import decision_rows, decision_table

pytestmark = pytest.mark.filterwarnings("error")

def record(prompt_id, method, label, rounds, best=True):
    return {"prompt_id": prompt_id, "method": method, "best": {"candidate_id": 0} if best else None,
            "params": {"setting": {"method": method, "params": {}, "label": label}}, "rounds": rounds}

def st_round(token, c, tau, memory=False):
    return {"decision_token": token, "rule": {"rule": "st-bon", "measures": {
        "c": c, "tau": tau, "c_plus_tau": None if c is None else c + tau, "memory_ended": memory, "note": "text"}}}

RECORDS = [
    record("0", "st-bon", "ST-BoN N=32", [st_round(5, 3, 3)]),
    record("1", "st-bon", "ST-BoN N=32", [st_round(9, 5, 5)]),
    record("2", "st-bon", "ST-BoN N=32", [st_round(9, None, None, memory=True)]),
    record("0", "sr", "SR α=0.5", [{"decision_token": 8, "rule": {"rule": "alpha"}}, {"decision_token": 16}]),
    record("1", "sr", "SR α=0.5", [{"decision_token": 10, "rule": {"rule": "alpha"}}]),
    record("2", "sr", "SR α=0.5", [], best=False),  # unanswered: left out
    {"prompt_id": "3", "method": "sr", "error": "out of memory", "params": {}},
]

def test_rows_take_the_first_rounds_numeric_measures():
    rows = decision_rows(RECORDS)
    assert list(rows["prompt_id"]) == ["0", "1", "2", "0", "1"]
    assert "measure:note" not in rows  # text is not tabulated
    st = rows[rows["method"] == "st-bon"]
    assert list(st["measure:c"].fillna(-1)) == [3, 5, -1] and list(st["measure:memory_ended"]) == [0, 0, 1]
    assert list(rows["num_rounds"]) == [1, 1, 1, 2, 1]

def test_table_by_hand():
    table = decision_table(decision_rows(RECORDS))
    c = table.loc[("ST-BoN N=32", "c")]
    # c over the prompts that have it: 3 and 5 -> median 4, mean 4; one prompt lacks it
    assert (c["prompts"], c["median"], c["min"], c["max"], c["mean"], c["missing"]) == (3, 4, 3, 5, 4, 1)
    assert table.loc[("ST-BoN N=32", "c_plus_tau"), "median"] == 8  # 6 and 10
    assert table.loc[("ST-BoN N=32", "memory_ended"), "mean"] == pytest.approx(1 / 3)
    sr = table.loc["SR α=0.5"]
    assert list(sr.index) == ["num_rounds", "first_decision_token"]  # SR records no measures
    assert sr.loc["first_decision_token", "median"] == 9 and sr.loc["num_rounds", "max"] == 2
    assert not table["median"].isna().any()


def test_a_method_that_decides_twice_shows_both_rounds_measures():
    def cut(token, threshold):
        return {"decision_token": token, "rule": {"rule": "two-cuts", "measures": {"threshold": threshold}}}
    records = [record("0", "two-cuts", "Two cuts", [cut(4, 0.2), cut(8, 0.5)]),
               record("1", "two-cuts", "Two cuts", [cut(4, 0.4), cut(8, 0.7)]),
               record("2", "two-cuts", "Two cuts", [cut(4, 0.6)])]  # stopped after one cut
    table = decision_table(decision_rows(records)).loc["Two cuts"]
    assert list(table.index) == ["num_rounds", "first_decision_token", "threshold", "threshold (round 2)"]
    # round 1: 0.2, 0.4, 0.6 -> median 0.4; round 2: 0.5 and 0.7 -> median 0.6, one prompt without it
    assert table.loc["threshold", "median"] == pytest.approx(0.4)
    second = table.loc["threshold (round 2)"]
    assert (second["prompts"], second["median"], second["missing"]) == (3, pytest.approx(0.6), 1)
