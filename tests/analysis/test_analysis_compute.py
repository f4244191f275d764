"""Eq. 7's compute: the records' measured compute (timing.compute_s, the runs frame's work_s),
wall-clock time beside it (relative_wall), and records made before compute_s was recorded."""

import warnings

import pandas as pd
import pytest

from analysis.figures import COMPUTE_LABEL, WALL_LABEL, figure3_compute_vs_improvement
from analysis.io import best_responses_frame
from analysis.metrics import method_summary

pytestmark = pytest.mark.filterwarnings("error")

BO8 = {"method": "bon", "n": 8, "setting": '{"n":8}', "method_label": "Bo8"}
BO32 = {"method": "bon", "n": 32, "setting": '{"n":32}', "method_label": "Bo32"}
SR = {"method": "sr", "n": 32, "setting": '{"alpha":0.5}', "method_label": "SR α=0.5"}
# (configuration, wall seconds, CPU seconds) on each of two prompts: SR's wall time was slowed
# by a neighbour (6 s for 2 s of work), Bo32's was not.
TIMES = [(BO8, 1.0, 1.0), (BO32, 4.0, 4.0), (SR, 6.0, 2.0)]


def runs(work: bool = True) -> pd.DataFrame:
    rows = []
    for prompt_id, scores in {"p1": (1.0, 3.0, 2.0), "p2": (0.0, 4.0, 3.0)}.items():
        for (config, wall, cpu), score in zip(TIMES, scores, strict=True):
            rows.append({**config, "prompt_id": prompt_id, "score": score, "worst_score": score - 2.0,
                         "time_s": wall, **({"work_s": cpu, "threads": 1} if work else {})})
    return pd.DataFrame(rows)


def by_label(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.set_index("method_label")


def test_eq7_counts_the_measured_compute_and_keeps_wall_time_beside_it():
    summary = by_label(method_summary(runs(), n_resamples=0))
    # CPU seconds over two prompts: Bo8 2, Bo32 8, SR 4; wall seconds: 2, 8, 12
    assert summary["compute_s"].to_dict() == {"Bo8": 2.0, "Bo32": 8.0, "SR α=0.5": 4.0}
    assert summary["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "SR α=0.5": 2.0}
    assert summary.loc["SR α=0.5", "speedup_vs_largest_bon"] == 2.0
    assert summary["relative_wall"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "SR α=0.5": 6.0}
    assert summary.loc["SR α=0.5", "wall_speedup_vs_largest_bon"] == pytest.approx(8.0 / 12.0)


def test_runs_without_measured_compute_count_wall_time_and_a_partial_column_says_so():
    plain = by_label(method_summary(runs(work=False), n_resamples=0))  # no work_s column: wall time, silently
    assert plain["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "SR α=0.5": 6.0}
    mixed = runs()
    mixed.loc[mixed["method"] == "sr", "work_s"] = float("nan")  # SR's records predate compute_s
    with pytest.warns(UserWarning, match=r"2 of 6 runs have no timing.compute_s.*wall-clock time") as caught:
        summary = by_label(method_summary(mixed, n_resamples=0))
    assert len(caught) == 1 and len(str(caught[0].message).splitlines()) == 1
    assert summary["relative_compute"].to_dict() == {"Bo8": 1.0, "Bo32": 4.0, "SR α=0.5": 6.0}  # one measure for all


def test_runs_on_different_thread_counts_are_warned_about():
    mixed = runs().assign(threads=lambda frame: (frame["method"] == "sr").map({True: 2, False: 1}))
    with pytest.warns(UserWarning, match=r"different CPU thread counts \(1, 2\)"):
        method_summary(mixed, n_resamples=0)


def test_the_runs_frame_reads_compute_and_threads_from_the_record():
    record = {"prompt_id": "p1", "prompt": "Hi", "method": "bon",
              "params": {"n": 8, "seed": 0, "model": "gen", "reward": "rm",
                         "setting": {"method": "bon", "params": {"n": 8}, "label": "Bo8"}},
              "best": {"candidate_id": 0, "text": "x", "score": 1.0, "num_tokens": 1},
              "worst": {"candidate_id": 0, "score": 1.0}, "candidates": [], "rounds": [],
              "timing": {"total_s": 3.0, "generate_s": 2.0, "score_s": 1.0, "compute_s": 1.5,
                         "compute_clock": "process_cpu", "threads": 2},
              "tokens": {"generated": 4, "scored": 4}, "peak_kv_bytes": 1}
    old = {**record, "prompt_id": "p2", "timing": {"total_s": 3.0, "generate_s": 2.0, "score_s": 1.0}}
    frame = best_responses_frame([record, old]).set_index("prompt_id")
    assert frame.loc["p1", ["time_s", "work_s", "threads"]].tolist() == [3.0, 1.5, 2]
    assert frame.loc["p2", ["work_s", "threads"]].isna().all()


def test_figure3_defaults_to_the_measured_compute_and_offers_wall_time():
    summary = method_summary(runs(), n_resamples=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the figure's own font and layout notices are not under test
        default, wall = (figure3_compute_vs_improvement(summary, compute=c).axes[0] for c in ("work", "wall"))
    assert default.get_xlabel() == COMPUTE_LABEL and wall.get_xlabel() == WALL_LABEL
    xs = {name: {x for line in axes.get_lines() for x in line.get_xdata()} for name, axes in
          (("work", default), ("wall", wall))}
    assert 2.0 in xs["work"] and 6.0 not in xs["work"]  # SR at its CPU ratio
    assert 6.0 in xs["wall"] and 2.0 not in xs["wall"]  # and at its wall-clock ratio
    assert figure3_compute_vs_improvement.__defaults__[-1] == "work"
