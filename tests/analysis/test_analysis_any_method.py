"""A method from outside the project ("first-k") flows through the whole analysis like SR: run
records → runs frame → summary → BoN-equivalent compute → headline, Table 1's grouping, Table 2's
rows and Figure 3's series. Expected numbers are worked out by hand in the comments."""

import math

import pandas as pd
import pytest

from analysis.figures import figure3_compute_vs_improvement
from analysis.headline import headline_table
from analysis.io import best_responses_frame
from analysis.bon_curve import bon_equivalent_compute
from analysis.metrics import bootstrap_draws, method_summary
from analysis.summary_details import render_details_markdown
from analysis.summary_page import render_headline_markdown
from analysis.tables import table2_perplexity_speedup
from analysis.winrate import bon_min_label, group_by_method

pytestmark = pytest.mark.filterwarnings("error")

HALF = math.log(0.5)  # every returned response: two tokens of probability 0.5, perplexity 2


def record(prompt_id, method, setting, score, worst, time_s, flops=None, **params):
    """One answered record as the engine writes it (``params.setting``, ``params.display`` when the
    setting names one; ``flops`` when counted)."""
    display = {"display": setting["display"]} if "display" in setting else {}
    setting = {key: value for key, value in setting.items() if key != "display"}
    out = {"prompt_id": prompt_id, "prompt": f"Prompt {prompt_id}", "method": method,
           "params": {"model": "gen", "reward": "rm", "seed": 0, **params, "setting": setting, **display},
           "best": {"candidate_id": 0, "text": "answer", "score": score, "num_tokens": 2},
           "worst": {"candidate_id": 1, "score": worst},
           "candidates": [{"id": 0, "text": "answer", "token_logprobs": [HALF, HALF], "num_tokens": 2,
                           "final_score": score, "halted_round": None}],
           "rounds": [], "timing": {"total_s": time_s, "generate_s": time_s, "score_s": 0.0, "compute_s": time_s},
           "tokens": {"generated": 10, "scored": 10}, "peak_kv_bytes": 0}
    if flops is not None:
        out["flops"] = {"prefill": 0, "generate": flops, "reward": 0, "total": flops}
    return out


# Best-of-N and SR carry their declarations' display; first-k, like a run file written before
# displays were recorded, has none and is drawn with the fallback.
BON_DISPLAY = {"name": "Best-of-N", "color": "#ff7f0e", "marker": "s", "reference": True}
FIRST_K = {"method": "first-k", "params": {"k": 2, "n": 3}, "label": "First 2 of 3"}
SR = {"method": "sr", "params": {"alpha": 0.5, "batch_size": None, "min_tokens": 8}, "label": "SR α=0.5",
      "display": {"name": "SR", "color": "#1f77b4", "marker": "o", "reference": False}}


def study_records(reference: str = "bon") -> list[dict]:
    # Per prompt (p1, p2): Bo4 best 1.0 / 0.0, worst -1.0 / -2.0 (eq. 8 spread 2 on both), 1 s, 100 FLOPs.
    # Bo16, merged from 2 shards of 8 (params.n and the setting's n the total, as merge_shards writes it),
    # best 2.0 / 1.0 at a mean shard time of 2 s (compute 2 × 2 = 4 s) and 400 FLOPs (the shards' sum).
    # first-k best 1.5 / 0.5 at 1 s and 150 FLOPs; SR best 1.0 / 0.5 at 0.5 s, FLOPs not counted.
    # The reference is Best-of-N by its display, whatever its method is called.
    bo4 = {"method": reference, "params": {"n": 4, "batch_size": 4}, "label": "Bo4", "display": BON_DISPLAY}
    shard = {"method": reference, "params": {"n": 16, "batch_size": 8}, "label": "Bo16", "display": BON_DISPLAY}
    records = []
    for prompt, (best4, worst4, best16, first_k, sr) in {"p1": (1.0, -1.0, 2.0, 1.5, 1.0),
                                                         "p2": (0.0, -2.0, 1.0, 0.5, 0.5)}.items():
        records += [
            record(prompt, reference, bo4, best4, worst4, 1.0, 100, n=4),
            record(prompt, reference, shard, best16, -5.0, 2.0, 400, n=16, shards=2, shard_size=8),
            record(prompt, "first-k", FIRST_K, first_k, -5.0, 1.0, 150, k=2),
            record(prompt, "sr", SR, sr, -5.0, 0.5, None, alpha=0.5, init_batch_size=8),
        ]
    return records


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return best_responses_frame(study_records())


def test_the_runs_frame_keys_every_record_by_its_setting(runs):
    configs = runs.drop_duplicates("method_label")
    assert configs[["method", "setting", "method_label"]].values.tolist() == [
        ["bon", '{"n":4}', "Bo4"], ["bon", '{"n":16}', "Bo16"], ["first-k", '{"k":2,"n":3}', "First 2 of 3"],
        ["sr", '{"alpha":0.5,"batch_size":null,"min_tokens":8}', "SR α=0.5"]]
    assert configs["n"].tolist()[:2] == [4, 16] and math.isnan(configs["n"].iloc[2]) and configs["n"].iloc[3] == 8
    assert configs["flops"].tolist()[:3] == [100.0, 400.0, 150.0] and math.isnan(configs["flops"].iloc[3])


@pytest.mark.parametrize("reference", ["bon", "ladder"])
def test_summary_and_bon_equivalent_of_every_method(reference):
    runs = best_responses_frame(study_records(reference))
    summary = method_summary(runs, n_resamples=0).set_index("method_label")
    assert summary["reference"].tolist() == [True, True, False, False]
    assert summary["method_name"].tolist() == ["Best-of-N", "Best-of-N", "first-k", "SR"]
    assert summary.index.tolist() == ["Bo4", "Bo16", "First 2 of 3", "SR α=0.5"]
    # eq. 8 against Bo4 (spread 2): Bo16 150 on both prompts; first-k p1 100·(1 + 0.5/2) = 125, p2
    # 100·(1 + 0.5/2) = 125; SR p1 100, p2 125 → 112.5.
    assert summary["improvement"].to_dict() == {"Bo4": 100.0, "Bo16": 150.0, "First 2 of 3": 125.0,
                                                "SR α=0.5": 112.5}
    # eq. 7: Bo4 2 s, Bo16 2 prompts × 2 shards × 2 s = 8 s, first-k 2 s, SR 1 s.
    assert summary["relative_compute"].to_dict() == {"Bo4": 1.0, "Bo16": 4.0, "First 2 of 3": 1.0, "SR α=0.5": 0.5}
    # FLOPs: Bo4 200, Bo16 800, first-k 300; SR has none.
    assert summary["relative_flops"].iloc[:3].tolist() == [1.0, 4.0, 1.5]
    assert summary.loc["First 2 of 3", "flops_speedup_vs_largest_bon"] == pytest.approx(800 / 300)
    assert math.isnan(summary.loc["SR α=0.5", "relative_flops"])
    located = bon_equivalent_compute(method_summary(runs, n_resamples=100),
                                     draws=bootstrap_draws(runs, n_resamples=100)).set_index("method_label")
    assert located.index.tolist() == ["First 2 of 3", "SR α=0.5"]
    # first-k's 125 is halfway from Bo4 (1, 100) to Bo16 (4, 150) in log compute: 2, a speedup of 2 / 1.
    assert located.loc["First 2 of 3", "bon_equivalent_compute"] == pytest.approx(2.0)
    assert located.loc["First 2 of 3", "compute_speedup"] == pytest.approx(2.0)
    # SR's 112.5 a quarter of the way: 4^0.25 = √2, a speedup of √2 / 0.5.
    assert located.loc["SR α=0.5", "compute_speedup"] == pytest.approx(2 * math.sqrt(2))
    # on the FLOPs axis: Bo4 (1, 100), Bo16 (4, 150); first-k's 125 again needs 2x Bo4's FLOPs, at 1.5x
    # them: a FLOP speedup of 2 / 1.5; SR counted none, so it has no FLOP speedup
    assert located.loc["First 2 of 3", "bon_equivalent_flops"] == pytest.approx(2.0)
    assert located.loc["First 2 of 3", "flops_speedup"] == pytest.approx(2.0 / 1.5)
    assert located.loc["First 2 of 3", "flops_speedup_lo"] <= located.loc["First 2 of 3", "flops_speedup_hi"]
    assert math.isnan(located.loc["SR α=0.5", "flops_speedup"])


def test_headline_table2_table1_and_figure3_carry_every_method(runs):
    summary = method_summary(runs, by=["pair", "generator"], n_resamples=0)
    located = bon_equivalent_compute(summary, by=["pair", "generator"])
    headline = headline_table(summary, located)
    assert headline[["method_label", "best"]].values.tolist() == [["First 2 of 3", True], ["SR α=0.5", True]]
    page = render_headline_markdown(headline, summary=summary)
    # the headline: SR's α=0.5 (the paper's method first) at √2 / 0.5 ≈ 2.8× less compute, ≈ √2 × 4 ≈ Bo6
    assert page.split("\n\n")[1] == (
        "**SR α=0.5**, the best setting of SR on gen / rm, matches Best-of-N's score with **2.8× less compute** (the "
        "speedup at equal score, in CPU seconds of the work): it scores 112 at 0.50× Bo4's compute, where Best-of-N "
        "needs ≈ 1.4× (≈ Bo6).")
    # one table: the ladder, then every method's settings; first-k's FLOPs (1.5× Bo4's) beside its compute
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("|")]
    assert rows[0] == ["Setting", "score", "compute (× Bo4)", "FLOPs (× Bo4)", "speedup at equal score"]
    assert rows[2:] == [["Bo4", "100", "1.0", "1.0", "reference"], ["Bo16", "150", "4.0", "4.0", "reference"],
                        ["**SR α=0.5** (best)", "112", "0.50", "--", "2.8"],
                        ["**First 2 of 3** (best)", "125", "1.0", "1.5", "2.0"]]
    page = render_details_markdown(headline)
    assert ("**First 2 of 3** scores 125 (eq. 8; Bo4 = 100) at 1.0× Bo4's compute (1.5× its FLOPs); Best-of-N "
            "needs ≈ 2.0× Bo4's compute to match it (≈ Bo8): 2.0× less compute at equal score (1.3× in FLOPs).") in page
    assert "**SR α=0.5** scores 112 (eq. 8; Bo4 = 100) at 0.50× Bo4's compute; Best-of-N" in page

    table = table2_perplexity_speedup(summary)
    assert table.index.tolist() == ["Bo4", "Bo16", "First 2 of 3", "SR α=0.5"]
    # speedup against Bo16: 8 s / 2 s = 4 in time, 800 / 300 FLOPs; perplexity 2 everywhere
    assert table.loc["First 2 of 3", ["gen PPL", "gen Speedup"]].tolist() == [pytest.approx(2.0), 4.0]
    assert table.loc["First 2 of 3", "gen FLOP speedup"] == pytest.approx(800 / 300)
    assert math.isnan(table.loc["SR α=0.5", "gen FLOP speedup"])

    grouped = group_by_method(study_records())
    assert list(grouped) == ["Bo4", "Bo16", "First 2 of 3", "SR α=0.5"] and bon_min_label(grouped) == "Bo4"
    assert [len(records) for records in grouped.values()] == [2, 2, 2, 2]

    (axes,) = figure3_compute_vs_improvement(summary).axes
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["Best-of-N", "first-k", "SR"]
    colors = [container.lines[0].get_color() for container in axes.containers]  # one errorbar per series
    assert colors[0] == "#ff7f0e" and colors[2] == "#1f77b4" and colors[1] not in ("#ff7f0e", "#1f77b4")
    assert {"4", "16", "First 2 of 3", "α=0.5"} <= {text.get_text() for text in axes.texts}
