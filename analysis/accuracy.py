"""Accuracy on problems with reference answers (issue 50): a quality axis that no method optimises.

Every completed candidate of a prompt with a reference (``record["reference"]``) carries its
extracted ``answer`` and whether it is ``correct`` (``specrej.records.answers``).  From those:
``candidate_frame`` (one row per candidate, with its record's configuration, compute and FLOPs);
``selections`` (per configuration, prompt and rule of ``SELECT_RULES``, the candidate that
``specrej.records.answers.select``, the engine's own rule, chooses); ``accuracy_summary`` (with
cost, and the place on the self-consistency curve); ``ladder_selections`` and ``vote_ladder``
(SC@k, BoN@k, pass@k from one pool per prompt); ``analysis.correctness`` asks the partial reward
whether a candidate ends correct.

Best-of-N records merged from shards must keep every candidate (``merge_shards(...,
all_candidates=True)``): a vote over the one candidate a default merge keeps is no vote, and
``candidate_frame`` refuses such a record.  Records that failed (an error without candidates) are
left out; ``analysis.io.failed_prompts`` lists them.  Intervals come from ``analysis.bootstrap``:
one resample matrix per group serves every configuration and rule, so ratios are paired.
"""

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis._columns import require_columns
from analysis.bon_curve import bon_equivalent_compute
from analysis.bootstrap import DEFAULT_CONFIDENCE, bootstrap_weights, percentile_interval
from analysis.io import record_configuration, record_flops, record_setting
from analysis.metrics import eq7_seconds
from analysis.settings import (
    DISPLAY_COLUMNS,
    canonical_setting,
    configuration_order,
    record_display,
    reference_label,
    with_display,
)
from specrej.records.answers import SELECT_RULES, select, vote_weights, weighted_vote  # torch-free

CANDIDATE_COLUMNS = ["prompt_id", "candidate_id", "answer", "correct", "final_score", "vote_weight"]
RECORD_COLUMNS = ["method", "setting", "method_label", "n", "own_rule", "reference_answer", "problem_set",
                  "generator", "reward", "pair", "time_s", "work_s", "threads", "shards", "flops", *DISPLAY_COLUMNS]
CONFIG_KEY = ["method", "setting"]
SELECTED_COLUMNS = ["prompt_id", *CONFIG_KEY, "method_label", "n", "rule", "correct", "time_s", "shards", "flops"]
# The curve every configuration is located on: the reference method (Best-of-N) under this rule.
CURVE_RULE = "vote"
# ``ladder_selections``' pseudo-rule: any of the first k candidates is right (pass@k, the ceiling).
PASS_RULE = "pass"
# The one row of a record that completed no candidate: its prompt is wrong, its compute spent.
_NO_CANDIDATE = {"id": None, "answer": None, "correct": False, "final_score": math.nan, "vote_weight": math.nan}
LADDER_NAMES = {"reward": "BoN@{k}", "vote": "SC@{k}", "weighted-vote": "weighted SC@{k}"}
# bon_curve's output columns, renamed for the SC curve (on the FLOPs axis: sc_equivalent_flops...).
LOCATED_COLUMNS = {old: old.replace("bon_equivalent", "sc_equivalent").replace("compute_speedup", "sc_speedup")
                   for old in ("bon_equivalent_compute", "bon_equivalent_status", "bon_equivalent_compute_extrapolated",
                               "bon_equivalent_compute_lo", "bon_equivalent_compute_hi", "compute_speedup",
                               "compute_speedup_extrapolated", "compute_speedup_lo", "compute_speedup_hi",
                               "compute_speedup_lo_is_bound", "compute_speedup_hi_is_bound",
                               "bon_equivalent_in_range_frac")}


def candidate_frame(records: Iterable[dict], meta: Mapping | None = None) -> pd.DataFrame:
    """One row per completed candidate of every record with a reference answer.

    Columns: prompt_id (as recorded), candidate_id (nullable int), answer (extracted and
    normalised; missing when none was found), correct, final_score, vote_weight (its weight in its
    method's own vote, 0 when that vote leaves it out: ``specrej.records.answers.vote_weights``;
    NaN for a plain majority vote), then the record's
    (``RECORD_COLUMNS``): method, setting, method_label, n (``analysis.io.record_configuration``),
    own_rule (the rule that chose the record's ``best``: ``params["selection"]``, else "reward"),
    reference_answer, problem_set (the reference's digest, else None), generator, reward, pair
    (as ``analysis.io``), time_s, work_s, threads, shards (eq. 7's inputs: ``accuracy_summary``
    counts shards × ``analysis.metrics.eq7_seconds``), flops (``analysis.io.record_flops``), the
    display (DISPLAY_COLUMNS), and ``meta``'s keys as constant columns (they replace columns of the
    same name, as runs_table's pair label does).  A record that completed no candidate gets one row
    with candidate_id missing, no answer, correct False and final_score NaN: its prompt counts
    as wrong and its compute as spent.  Records without a reference, and failed records (an error
    and no candidates), are left out.
    """
    meta = dict(meta or {})
    rows = []
    for record in records:
        reference = record.get("reference") or {}
        if reference.get("answer") is None or "candidates" not in record:
            continue
        shared = {**_record_columns(record, reference), **meta}
        done = [c for c in record["candidates"] if c.get("complete")]
        _check_candidates(record, done)
        weights = vote_weights(record)
        rows += [{"prompt_id": record["prompt_id"], "candidate_id": c["id"], "answer": c.get("answer"),
                  "correct": bool(c["correct"]), "final_score": c.get("final_score"),
                  "vote_weight": math.nan if weights is None else weights.get(c["id"], 0.0), **shared}
                 for c in done or [_NO_CANDIDATE]]
    columns = [*CANDIDATE_COLUMNS, *RECORD_COLUMNS, *(key for key in meta if key not in RECORD_COLUMNS)]
    frame = pd.DataFrame(rows, columns=columns).astype({"candidate_id": "Int64", "correct": bool,
                                                        "final_score": float, "vote_weight": float})
    return with_display(frame)


def _record_columns(record: dict, reference: Mapping) -> dict:
    method, n, setting, label = record_configuration(record)
    params, timing = record.get("params") or {}, record.get("timing") or {}
    generator, reward = params.get("model"), params.get("reward")
    return {"method": method, "setting": setting, "method_label": label, "n": n,
            "own_rule": params.get("selection") or "reward", "reference_answer": str(reference["answer"]),
            "problem_set": reference.get("problem_set"), "generator": generator, "reward": reward,
            "pair": f"{generator} / {reward}", "time_s": timing.get("total_s", math.nan),
            "work_s": timing.get("compute_s", math.nan),
            "threads": timing["threads"] if isinstance(timing.get("threads"), int) else math.nan,
            "shards": params.get("shards", 1), "flops": record_flops(record),
            **record_display(record_setting(record))}


def _check_candidates(record: dict, done: list[dict]) -> None:
    kept, sampled = len(record["candidates"]), record.get("num_candidates", len(record["candidates"]))
    unchecked = [c.get("id") for c in done if "correct" not in c]
    if sampled > kept or unchecked:
        raise ValueError(f"record of prompt {record['prompt_id']!r}: " + (
            f"keeps {kept} of its {sampled} candidates (merged without all_candidates=True), a vote needs all"
            if sampled > kept else f"completed candidates {unchecked} of a prompt with a reference carry no 'correct'"))


def selections(candidates: pd.DataFrame, rules: Sequence[str] = SELECT_RULES) -> pd.DataFrame:
    """Per record (configuration and prompt) and rule, the candidate the rule selects.

    Input: ``candidate_frame`` output (frames may be concatenated).  Columns: the record's (every one
    but candidate_id, answer, correct, final_score), rule, candidate_id (the selected one's; missing
    without a completed candidate), answer, correct (False without one), n_candidates (those chosen
    among) and own_rule_selected (``rule`` is the record's own_rule, when that column is there).
    Candidates enter ``specrej.records.answers.select`` in candidate_id order (ties: the first).
    """
    require_columns(candidates, [*CANDIDATE_COLUMNS[:5], *CONFIG_KEY], "candidate frame")
    if "vote_weight" not in candidates:
        candidates = candidates.assign(vote_weight=math.nan)
    rows = [{**shared, "rule": rule, **_selected(done, rule)} for shared, done in _records(candidates)
            for rule in rules]
    selected = _selection_frame(rows, candidates)
    if "own_rule" in selected.columns:
        selected["own_rule_selected"] = selected["rule"] == selected["own_rule"]
    return selected


def _records(candidates: pd.DataFrame):
    """Per record of a candidate frame: its columns, and its completed candidates in candidate_id order."""
    record_columns = [c for c in candidates.columns if c not in CANDIDATE_COLUMNS[1:]]
    for key, group in candidates.groupby(record_columns, dropna=False, sort=False):
        yield dict(zip(record_columns, key, strict=True)), group[group["candidate_id"].notna()].sort_values(
            "candidate_id")


def _selection_frame(rows: list[dict], candidates: pd.DataFrame) -> pd.DataFrame:
    columns = [*(c for c in candidates.columns if c not in CANDIDATE_COLUMNS[1:]), "rule", "candidate_id", "answer",
               "correct", "n_candidates"]
    return pd.DataFrame(rows, columns=columns).astype({"candidate_id": "Int64", "correct": bool})


def _selected(done: pd.DataFrame, rule: str) -> dict:
    """The candidate of ``done`` (one record's completed candidates, in order) that ``rule`` selects;
    "vote" is the method's own vote where its record declares one (``vote_weight``)."""
    answers = [answer if isinstance(answer, str) else None for answer in done["answer"]]
    scores, weights = done["final_score"].astype(float).tolist(), done["vote_weight"].astype(float)
    if rule == "vote" and len(done) and weights.notna().all():
        voters = [answer if weight > 0 else None for answer, weight in zip(answers, weights, strict=True)]
        chosen = weighted_vote(voters, weights.tolist(), scores)
    else:
        chosen = select(answers, scores, rule)
    if chosen is None:
        return {"candidate_id": None, "answer": None, "correct": False, "n_candidates": 0}
    row = done.iloc[chosen]
    return {"candidate_id": row["candidate_id"], "answer": answers[chosen], "correct": bool(row["correct"]),
            "n_candidates": len(done)}


def accuracy_summary(selected: pd.DataFrame, *, by: Sequence[str] = (), reference_n: int = 16,
                     confidence_level: float = DEFAULT_CONFIDENCE, n_resamples: int = 2000,
                     seed: int = 0) -> pd.DataFrame:
    """Accuracy per configuration and rule (within each ``by`` group), its cost, and its place on
    the self-consistency (SC) curve: the reference method's rows under rule "vote".

    Input: ``selections`` (or ``ladder_selections``) output; only the prompts that every
    configuration and rule of a group has enter it.  Columns: *by, method, setting, method_label,
    n, the display, rule, n_prompts, accuracy (% correct), compute_s (sum over prompts of shards ×
    ``analysis.metrics.eq7_seconds``), relative_compute (over that of the reference's n =
    ``reference_n``, which SC@``reference_n`` reads too), flops, relative_flops (NaN unless every
    prompt of both has a count), accuracy and each ratio with _lo/_hi (a ``confidence_level``
    percentile interval over ``n_resamples`` prompt resamples drawn with ``seed``, the same for
    every row of a group); then each row located on the SC curve by
    ``analysis.bon_curve.bon_equivalent_compute`` in compute (``LOCATED_COLUMNS``:
    sc_equivalent_compute, sc_speedup = it / relative_compute, with status, intervals, bounds) and
    in FLOPs (sc_equivalent_flops, sc_flops_speedup, ...), NaN on the curve's own rows; then
    confidence_level, bootstrap_resamples.  Rows in ``configuration_order``, rules in input order.
    """
    by = list(by)
    require_columns(selected, [*SELECTED_COLUMNS, *by], "selections")
    duplicated = selected.duplicated([*by, *CONFIG_KEY, "rule", "prompt_id"])
    if duplicated.any():
        example = selected.loc[duplicated, [*by, *CONFIG_KEY, "rule", "prompt_id"]].iloc[0].to_dict()
        raise ValueError(f"selections hold several rows for one configuration, rule and prompt, e.g. {example}"
                         + ("" if by else "; pass by=['pair'] for several pairs"))
    selected = with_display(selected)
    groups = selected.groupby(by, sort=False) if by else [((), selected)]
    parts = []
    for keys, group in groups:
        part = _summarize_group(group, reference_n, confidence_level, n_resamples, seed)
        for position, (column, value) in enumerate(zip(by, keys, strict=True)):
            part.insert(position, column, value)
        parts.append(part)
    summary = pd.concat(parts, ignore_index=True)
    return summary.assign(confidence_level=confidence_level, bootstrap_resamples=n_resamples)


def _summarize_group(group: pd.DataFrame, reference_n: int, confidence_level: float, n_resamples: int,
                     seed: int) -> pd.DataFrame:
    rows = group.drop_duplicates([*CONFIG_KEY, "rule"])
    per_prompt = group.groupby("prompt_id", sort=False)["prompt_id"].transform("size")
    group = group[per_prompt == len(rows)]
    prompts = sorted(group["prompt_id"].unique(), key=str)
    if not prompts:
        raise ValueError("no prompt was answered by every configuration and rule of a group")
    order = sorted(range(len(rows)), key=lambda i: (configuration_order(*rows.iloc[i][
        ["reference", "method", "n", "method_label", "setting"]]), list(group["rule"].unique()).index(
            rows.iloc[i]["rule"])))
    rows = rows.iloc[order].reset_index(drop=True)
    keys = list(rows[[*CONFIG_KEY, "rule"]].itertuples(index=False, name=None))
    # column 0 is the sample itself, the others its resamples: one formula for both
    weights = np.hstack([np.ones((len(prompts), 1)), bootstrap_weights(len(prompts), n_resamples, seed).T])
    position = {prompt: i for i, prompt in enumerate(prompts)}
    group = group.assign(position=group["prompt_id"].map(position))
    records = group.drop_duplicates([*CONFIG_KEY, "prompt_id"])
    records = records.assign(compute_s=eq7_seconds(records) * records["shards"].astype(float))

    def by_prompt(frame: pd.DataFrame, key: list[str], column: str) -> np.ndarray:  # (rows, prompts)
        table = frame.set_index([*key, "position"])[column].astype(float).unstack("position")
        wanted = pd.MultiIndex.from_tuples([k[:len(key)] for k in keys], names=key)
        return table.reindex(index=wanted, columns=range(len(prompts))).to_numpy(dtype=float)

    accuracy = 100.0 * by_prompt(group, [*CONFIG_KEY, "rule"], "correct") @ weights / len(prompts)
    curve = rows["reference"].astype(bool) & (rows["rule"] == CURVE_RULE)
    reference = np.flatnonzero(rows["reference"].astype(bool) & (rows["n"] == reference_n))
    if reference.size == 0:
        raise ValueError(f"a group has no reference (Best-of-N) configuration with n = {reference_n}")
    summary = rows[["method", "setting", "method_label", "n", *DISPLAY_COLUMNS, "rule"]].assign(n_prompts=len(prompts))
    values = {"accuracy": accuracy}
    for name, column in (("accuracy", None), ("compute", "compute_s"), ("flops", "flops")):
        if column is not None:  # the total, then its ratio to the reference's
            total = by_prompt(records, CONFIG_KEY, column) @ weights
            summary[column], name = total[:, 0], f"relative_{name}"
            with np.errstate(divide="ignore", invalid="ignore"):
                values[name] = total / total[reference[0]]
        summary[name] = values[name][:, 0]
        summary[f"{name}_lo"], summary[f"{name}_hi"] = percentile_interval(values[name][:, 1:], confidence_level).T
    for axis in ("compute", "flops"):
        located = _locate_on_sc_curve(summary, values, curve, axis, confidence_level)
        summary = summary.join(located)
    return summary


def _locate_on_sc_curve(summary: pd.DataFrame, values: dict, curve: pd.Series, axis: str,
                        confidence_level: float) -> pd.DataFrame:
    """bon_curve's location of every row on the SC curve along ``axis``, indexed as ``summary``.

    Each row is its own "method" (reference = on the curve), so bon_curve's display lookup, which
    reads one reference flag per method, tells the curve's rows from the others."""
    renamed = {old: new if axis == "compute" else new.replace("sc_equivalent", "sc_equivalent_flops")
               .replace("_flops_compute", "_flops").replace("sc_speedup", "sc_flops_speedup")
               for old, new in LOCATED_COLUMNS.items()}
    if not curve.any():
        return pd.DataFrame(math.nan, index=summary.index, columns=list(renamed.values()))
    names = [f"row{i}" for i in range(len(summary))]
    points = pd.DataFrame({"method": np.where(curve, "sc-curve", names), "setting": "", "method_label": names,
                           "n": summary["n"], "reference": curve.to_numpy(), "improvement": summary["accuracy"],
                           "relative_compute": summary[f"relative_{axis}"]})
    n_resamples = values["accuracy"].shape[1] - 1
    draws = pd.DataFrame({"method": np.repeat(points["method"], n_resamples),
                          "method_label": np.repeat(names, n_resamples),
                          "resample": np.tile(np.arange(n_resamples), len(names)),
                          "improvement": values["accuracy"][:, 1:].ravel(),
                          "relative_compute": values[f"relative_{axis}"][:, 1:].ravel()})
    located = bon_equivalent_compute(points, draws=draws, confidence_level=confidence_level)
    located = located.set_index(located["method_label"].str.removeprefix("row").astype(int))
    return located[list(renamed)].rename(columns=renamed).reindex(range(len(summary)))


def ladder_selections(pool: pd.DataFrame, ks: Sequence[int], rules: Sequence[str] = SELECT_RULES) -> pd.DataFrame:
    """``selections`` of the first k candidates (in candidate_id order: shard order) of each record
    of ``pool`` (``candidate_frame`` of Best-of-N records merged with every candidate), for each k
    of ``ks``, as Best-of-k's rows: setting {"n": k}, n = k, the reference's label ("Bo16"), with
    the rule ``PASS_RULE`` (correct when any of the first k is: pass@k) besides ``rules``.  Compute
    is *scaled, not measured*: time_s, work_s and flops are k / N of the record's (N its n, else
    its candidates), i.e. k / shard size × its mean shard's (all that a merged record keeps);
    below one shard this assumes a smaller batch costs as much per candidate.  A record with fewer
    than max(ks) completed candidates is an error.
    """
    require_columns(pool, [*CANDIDATE_COLUMNS[:5], *CONFIG_KEY, "n", "time_s", "shards", "flops"], "candidate pool")
    ks = sorted({int(k) for k in ks})
    rows = []
    for shared, done in _records(pool):
        if len(done) < ks[-1]:
            raise ValueError(f"prompt {shared['prompt_id']!r} of {shared['method_label']} has {len(done)} completed "
                             f"candidates, fewer than k = {ks[-1]}")
        total = float(shared["n"]) if np.isfinite(float(shared["n"])) else float(len(done))
        for k in ks:
            first, scale = done.iloc[:k], k / total
            config = {**shared, "setting": canonical_setting({"n": k}), "method_label": reference_label(k), "n": k,
                      **{c: float(shared[c]) * scale for c in ("time_s", "work_s", "flops") if c in shared}}
            rows += [{**config, "rule": rule, **_selected(first, rule)} for rule in rules]
            rows.append({**config, "rule": PASS_RULE, "candidate_id": None, "answer": None,
                         "correct": bool(first["correct"].any()), "n_candidates": k})
    return _selection_frame(rows, pool)


def vote_ladder(pool: pd.DataFrame, ks: Sequence[int], rules: Sequence[str] = SELECT_RULES, *,
                by: Sequence[str] = (), reference_n: int = 16, confidence_level: float = DEFAULT_CONFIDENCE,
                n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """SC@k, BoN@k (and weighted SC@k) with pass@k beside them, from one pool of candidates per prompt.

    ``accuracy_summary`` of ``ladder_selections(pool, ks, rules)``, one row per (*by, k, rule),
    with k, ladder_label ("SC@16" for "vote", "BoN@16" for "reward", "weighted SC@16"),
    pass_at_k with pass_at_k_lo/_hi (any of the first k correct: the ceiling of every rule, on the
    same resamples), and compute_basis, which says that the ladder's compute is scaled from the
    pool's measured compute, so relative_compute is k / ``reference_n`` (``reference_n`` must be
    one of ``ks``).  BoN@k rows are located on the SC@k curve as in ``accuracy_summary``.
    """
    if reference_n not in set(ks):
        raise ValueError(f"ks {list(ks)} must include reference_n = {reference_n}: compute is relative to it")
    selected = ladder_selections(pool, ks, rules)
    summary = accuracy_summary(selected, by=by, reference_n=reference_n, confidence_level=confidence_level,
                               n_resamples=n_resamples, seed=seed)
    summary["k"] = summary["n"].astype(int)
    passes = summary.loc[summary["rule"] == PASS_RULE, [*by, "k", "accuracy", "accuracy_lo", "accuracy_hi"]]
    ladder = summary[summary["rule"] != PASS_RULE].merge(
        passes.rename(columns=lambda c: c.replace("accuracy", "pass_at_k")), on=[*by, "k"], how="left")
    ladder["ladder_label"] = [LADDER_NAMES[rule].format(k=k) for rule, k in zip(ladder["rule"], ladder["k"])]
    first = [*by, "k", "rule", "ladder_label", "accuracy", "accuracy_lo", "accuracy_hi", "pass_at_k", "pass_at_k_lo",
             "pass_at_k_hi"]
    ladder = ladder[first + [column for column in ladder.columns if column not in first]]
    return ladder.assign(compute_basis="k/N of the pool's measured compute (scaled, not measured per k)")
