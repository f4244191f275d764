"""Win-rate (WR) and length-controlled win-rate (LC-WR) against Bo-N_min: the paper's Table 1.

``winrate`` judges any two alpaca_eval-style output lists against each other; ``table1_inputs``
/ ``table1_from_files`` judge every method's best responses against Bo-N_min's, one row per
generator × method, and ``analysis.tables.write_table1`` writes the table.  The judging itself
is alpaca_eval's (``analysis.alpaca_eval_adapter``, with its offline workarounds); the judge is
chosen by name (``analysis.judge_registry``): ``gpt4_turbo`` (the paper's), ``local:<model>``,
``longest``, a Python callable, or ``auto``.

The summary and every Table 1 row record which judge produced them.  A small local model is a
weak judge: its numbers show that the pipeline runs, not the paper's quality claim.  When the
judge cannot run here (``JudgeUnavailable``: no judge configured, no API key, no alpaca_eval, a
local model that does not load) ``table1_or_not_evaluated`` and ``table1_from_files`` return
``not_evaluated_table``: every cell "not evaluated: <reason>".

This module never imports torch or alpaca_eval at import time, so ``analysis`` works without either.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.alpaca_eval_adapter import MINIMAL_GLM, import_alpaca_eval, judge_pairs, usable_judge
from analysis.io import best_candidate, is_reference, load_trajectories, record_configuration, record_setting
from analysis.judge_registry import AUTO, JudgeUnavailable, PairJudge, judge_name, resolve_judge
from analysis.settings import configuration_order, distinct_labels
from analysis.tables import NO_RESPONSE, NOT_EVALUATED, REFERENCE_NOTE

TABLE1_INPUT_COLUMNS = [
    "generator", "reward", "method_label", "win_rate", "lc_win_rate", "standard_error", "lc_standard_error",
    "n", "n_unparsed", "avg_length", "reference_avg_length", "judge", "reference_label", "note",
]


@dataclass
class WinrateResult:
    """``annotations``: one row per pair — instruction, output_1 / generator_1 (the reference),
    output_2 / generator_2 (the model), preference (1 reference better, 2 model better, 1.5 draw,
    values between for weighted judges, NaN when the verdict could not be parsed), annotator, the
    raw completion, and any extra input columns both sides share (e.g. prompt_id).
    ``summary``: see ``winrate``."""

    annotations: pd.DataFrame
    summary: dict


# ------------------------------------------------------------------------------------- win-rate
def winrate(
    model_outputs,
    reference_outputs,
    judge: str | PairJudge | None = AUTO,
    *,
    glm: str = MINIMAL_GLM,
    seed: int = 0,
) -> WinrateResult:
    """Judge ``model_outputs`` against ``reference_outputs`` with alpaca_eval; WR and LC-WR.

    Both are alpaca_eval outputs: a list of dicts, a DataFrame or a JSON path, with
    ``instruction``, ``output`` and ``generator`` (one name per side, the two different; it
    defaults to "model" / "reference").  Pairs are matched by row when both sides list the same
    instructions in the same order, else by instruction (alpaca_eval's inner join).  ``seed``
    seeds alpaca_eval's choice of which output is shown first.

    ``summary``: judge, annotator (alpaca_eval config), model, reference, n_pairs, n (parsed
    verdicts), n_unparsed, win_rate and standard_error (percent), discrete_win_rate, n_wins,
    n_wins_base, n_draws, lc_win_rate and lc_standard_error (NaN below 5 parsed verdicts or when
    every pair has the same length difference), glm, lc_note (why LC-WR is missing or unreliable,
    else ""), avg_length and reference_avg_length (characters).
    """
    judge = resolve_judge(judge)
    import_alpaca_eval()  # a missing install is named before the outputs are read
    models = _as_outputs(model_outputs, "model")
    references = _as_outputs(reference_outputs, "reference")
    model_name, reference_name = _single_generator(models, "model"), _single_generator(references, "reference")
    if model_name == reference_name:
        # alpaca_eval's LC-WR treats equal names as the baseline judged against itself (always 50)
        raise ValueError(f"model and reference outputs share the generator name {model_name!r}")
    ordered = len(models) == len(references) and models["instruction"].tolist() == references["instruction"].tolist()
    row, annotations, annotator = judge_pairs(models, references, judge, ordered=ordered, glm=glm, seed=seed)
    n_parsed = int(row["n_total"])
    summary = {
        "judge": judge_name(judge),
        "annotator": annotator,
        "model": model_name,
        "reference": reference_name,
        "n_pairs": len(annotations),
        "n": n_parsed,
        "n_unparsed": len(annotations) - n_parsed,
        "win_rate": float(row["win_rate"]),
        "standard_error": float(row["standard_error"]),
        "discrete_win_rate": float(row["discrete_win_rate"]),
        "n_wins": int(row["n_wins"]),
        "n_wins_base": int(row["n_wins_base"]),
        "n_draws": int(row["n_draws"]),
        "lc_win_rate": float(row["length_controlled_winrate"]),
        "lc_standard_error": float(row["lc_standard_error"]),
        "glm": glm,
        "lc_note": row["lc_note"],
        "avg_length": float(models["output"].str.len().mean()),
        "reference_avg_length": float(references["output"].str.len().mean()),
    }
    return WinrateResult(annotations=annotations, summary=summary)


def _as_outputs(outputs, default_generator: str) -> pd.DataFrame:
    if isinstance(outputs, (str, Path)):
        frame = pd.read_json(outputs)
    else:
        frame = pd.DataFrame(outputs).copy() if not isinstance(outputs, pd.DataFrame) else outputs.copy()
    missing = [column for column in ("instruction", "output") if column not in frame.columns]
    if missing:
        raise ValueError(f"outputs need columns instruction and output; missing {missing}")
    if frame.empty:
        raise ValueError("no outputs to judge")
    if "generator" not in frame.columns:
        frame["generator"] = default_generator
    frame["output"] = frame["output"].fillna("").astype(str)
    frame["instruction"] = frame["instruction"].astype(str)
    return frame.reset_index(drop=True)


def _single_generator(frame: pd.DataFrame, side: str) -> str:
    names = frame["generator"].unique()
    if len(names) != 1:
        raise ValueError(f"{side} outputs must come from one generator, found {list(names)}")
    return str(names[0])


# ------------------------------------------------------------------------------------- Table 1
def group_by_method(records: Iterable[dict]) -> dict[str, list[dict]]:
    """Trajectory records keyed by their setting's label (``Bo120``, ``SR α=0.5``, any method's
    own; ``analysis.io.record_configuration``), one key per (method, setting), in Table 1's order:
    the reference (Best-of-N) by N, then the other methods by name and their settings by label
    (``analysis.settings.configuration_order``). Two settings sharing a label are told apart as
    in the other tables (``analysis.settings.distinct_labels``)."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        method, n, setting, label = record_configuration(record)
        groups.setdefault((method, setting), [n, label, [], is_reference(record_setting(record))])[2].append(record)
    keys = sorted(groups, key=lambda key: configuration_order(groups[key][3], key[0], groups[key][0], groups[key][1],
                                                              key[1]))
    labels = distinct_labels([(method, setting, groups[(method, setting)][1]) for method, setting in keys])
    return {label: groups[key][2] for label, key in zip(labels, keys, strict=True)}


def runs_by_method_from_files(paths: Iterable[str | Path]) -> dict[str, list[dict]]:
    """``group_by_method`` over the records of several trajectory JSONL files."""
    return group_by_method(record for path in paths for record in load_trajectories(path))


def best_response_text(record: dict) -> str | None:
    """The text of the response a method returned for a record; None for a failed record."""
    if "error" in record or record.get("best") is None:
        return None
    if record["best"].get("text") is not None:
        return record["best"]["text"]
    candidate = best_candidate(record)
    return candidate.get("text") if candidate else None


def bon_min_label(runs_by_method: Mapping[str, Iterable[dict]]) -> str:
    """The label of the Best-of-N configuration with the smallest N: the Table 1 reference."""
    bon = {}
    for label, records in runs_by_method.items():
        for record in records:
            _, n, _, _ = record_configuration(record)
            if is_reference(record_setting(record)) and n is not None:
                bon[label] = min(bon.get(label, math.inf), n)
    if not bon:
        raise ValueError("no Best-of-N run to use as the Bo-N_min reference; pass reference_label")
    return min(bon, key=bon.get)


def table1_inputs(
    runs_by_method: Mapping[str, Iterable[dict]],
    reference_label: str | None = None,
    judge: str | PairJudge | None = AUTO,
    *,
    glm: str = MINIMAL_GLM,
    seed: int = 0,
    annotations_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Table 1's input: every method's best responses judged against the reference's.

    ``runs_by_method`` maps a method label to its trajectory records (``group_by_method``,
    ``runs_by_method_from_files``); records may span several generator / reward pairs
    (``params.model`` / ``params.reward``) and are compared within each.  ``reference_label``
    defaults to Bo-N_min (``bon_min_label``).  Pairs are the prompts both answered.

    One row per pair × method, columns ``TABLE1_INPUT_COLUMNS``: generator (``params.model``;
    ``"<model> / <reward>"`` when a model appears with several rewards, so Table 1 stays one
    row per generator), reward, method_label, win_rate and lc_win_rate (percent; the reference
    row is 50 by definition and is not judged), standard errors, n (parsed verdicts),
    n_unparsed, avg_length / reference_avg_length (characters), judge, reference_label, note.
    Feed it to ``analysis.tables.table1_win_rates``.  With ``annotations_dir``, each comparison's
    per-pair annotations are written there as JSON.  Raises ``JudgeUnavailable`` (before any
    judging) when the judge cannot run: see ``table1_or_not_evaluated``.
    """
    runs = {label: list(records) for label, records in runs_by_method.items()}
    reference_label = reference_label or bon_min_label(runs)
    if reference_label not in runs:
        raise ValueError(f"reference {reference_label!r} is not among the methods {list(runs)}")
    judge = resolve_judge(judge)
    import_alpaca_eval()
    answers = {label: _answers_by_pair(records) for label, records in runs.items()}
    pairs = list(answers[reference_label])
    rewards_per_model = pd.Series([model for model, _ in pairs]).value_counts()
    rows = []
    for model, reward in pairs:
        generator = model if rewards_per_model[model] == 1 else f"{model} / {reward}"
        reference = answers[reference_label][(model, reward)]
        common = {"generator": generator, "reward": reward, "judge": judge_name(judge),
                  "reference_label": reference_label}
        rows.append({**common, "method_label": reference_label, "win_rate": 50.0, "lc_win_rate": 50.0,
                     "n": len(reference), "n_unparsed": 0, "note": REFERENCE_NOTE,
                     "avg_length": _mean_length(reference.values()),
                     "reference_avg_length": _mean_length(reference.values())})
        for label in runs:
            candidate = answers[label].get((model, reward))
            if label == reference_label or candidate is None:
                continue
            shared = [prompt_id for prompt_id in reference if prompt_id in candidate]
            if not shared:
                rows.append({**common, "method_label": label, "n": 0, "note": "no prompt answered by both"})
                continue
            result = winrate(
                [{"instruction": reference[p][0], "output": candidate[p][1], "generator": label, "prompt_id": str(p)}
                 for p in shared],
                [{"instruction": reference[p][0], "output": reference[p][1], "generator": reference_label,
                  "prompt_id": str(p)} for p in shared],
                judge=judge, glm=glm, seed=seed,
            )
            summary = result.summary
            rows.append({**common, "method_label": label, "note": summary["lc_note"],
                         **{key: summary[key] for key in ("win_rate", "lc_win_rate", "standard_error",
                                                          "lc_standard_error", "n", "n_unparsed", "avg_length",
                                                          "reference_avg_length")}})
            if annotations_dir is not None:
                _write_annotations(result, Path(annotations_dir), generator, label)
    return pd.DataFrame(rows).reindex(columns=TABLE1_INPUT_COLUMNS)


def not_evaluated_table(
    reason: str,
    runs_by_method: Mapping[str, Iterable[dict]] | None = None,
    *,
    generators: Sequence[str] = (),
    method_labels: Sequence[str] = (),
) -> pd.DataFrame:
    """Table 1 input that says why it is empty: NaN metrics, ``note = "not evaluated: <reason>"``.

    Rows are every generator × method, taken from ``runs_by_method`` or given explicitly, so
    ``table1_win_rates`` still lays the table out (with "--" cells); one placeholder row when
    neither is known.  ``frame.attrs["status"]`` carries the note too.
    """
    note = f"{NOT_EVALUATED}: {reason}"
    if runs_by_method is not None:
        runs_generators, runs_labels = _cells_of(runs_by_method)
        generators, method_labels = generators or runs_generators, method_labels or runs_labels
    cells = [(g, m) for g in generators for m in method_labels] or [("(none)", "(none)")]
    frame = pd.DataFrame([{"generator": g, "method_label": m, "note": note} for g, m in cells])
    frame = frame.reindex(columns=TABLE1_INPUT_COLUMNS)
    frame.attrs["status"] = note
    return frame


def table1_or_not_evaluated(
    runs_by_method: Mapping[str, Iterable[dict]], reference_label: str | None = None,
    judge: str | PairJudge | None = AUTO, **kwargs,
) -> pd.DataFrame:
    """``table1_inputs``, or ``not_evaluated_table(reason)`` when the judge cannot run here."""
    runs = {label: list(records) for label, records in runs_by_method.items()}
    generators, method_labels = _cells_of(runs)
    return _unless_judge_unavailable(lambda: table1_inputs(runs, reference_label, judge, **kwargs),
                                     generators, method_labels)


def table1_from_files(
    files_by_generator: Mapping[str, Iterable[str | Path]],
    judge: str | PairJudge | None = AUTO,
    reference_label: str | None = None,
    *,
    annotations_dir: str | Path | None = None,
    **kwargs,
) -> pd.DataFrame:
    """Table 1's input from trajectory files: ``{generator label: the run files of its pair}``
    (each generator's Bo-N and SR runs under one reward), e.g. the workflow's Table 1 pairs.

    Per generator, a prompt that failed in any of its runs (an error record, or no complete
    response) is left out of every method, as ``analysis.metrics`` does for the other tables,
    so every method is judged on the same prompts; a setting that answered no prompt at all
    is a row of its own, n 0 and note ``analysis.tables.NO_RESPONSE``, and leaves out no prompt.  The ``generator`` column holds the given
    label; with ``annotations_dir``, each generator's annotations go to a sub-folder named after
    it.  The judge is checked once, before any judging (a local model is loaded then): when it
    cannot run here the result is ``not_evaluated_table`` over every generator and method, with
    ``attrs["status"]``, as from ``table1_or_not_evaluated``.  Other arguments: ``table1_inputs``.
    """
    records = {generator: [r for path in paths for r in load_trajectories(path)]
               for generator, paths in files_by_generator.items()}
    method_labels = list(group_by_method(r for group in records.values() for r in group))

    def judge_every_generator() -> pd.DataFrame:
        checked = usable_judge(judge)
        frames = []
        for generator, group in records.items():
            # a setting that answered no prompt has no row to judge: it gets a row saying so and
            # leaves the others' prompts alone (else one such setting would empty the table)
            silent = [label for label, runs in group_by_method(group).items()
                      if all(best_response_text(r) is None for r in runs)]
            kept = [r for label, runs in group_by_method(group).items() if label not in silent for r in runs]
            failed = {r["prompt_id"] for r in kept if best_response_text(r) is None}
            answered = [r for r in kept if r["prompt_id"] not in failed]
            if not answered:
                frame = not_evaluated_table("every prompt failed in at least one run", group_by_method(group))
            else:
                folder = None if annotations_dir is None else Path(annotations_dir) / _slug(generator)
                frame = table1_inputs(group_by_method(answered), reference_label, checked, annotations_dir=folder,
                                      **kwargs)
            frames.append(frame.assign(generator=generator))
            if silent:
                frames.append(pd.DataFrame([{"generator": generator, "method_label": label, "n": 0,
                                             "note": NO_RESPONSE} for label in silent]))
        return pd.concat(frames, ignore_index=True).reindex(columns=TABLE1_INPUT_COLUMNS)

    return _unless_judge_unavailable(judge_every_generator, list(records), method_labels)


def _unless_judge_unavailable(
    judge_all: Callable[[], pd.DataFrame], generators: Sequence[str], method_labels: Sequence[str],
) -> pd.DataFrame:
    """The one "not evaluated" path: ``judge_all()``, or, when it raises ``JudgeUnavailable``
    (always before anything is judged), a warning and ``not_evaluated_table`` over the cells."""
    try:
        return judge_all()
    except JudgeUnavailable as error:
        logging.getLogger(__name__).warning("Table 1 not evaluated: %s", error)
        return not_evaluated_table(str(error), generators=generators, method_labels=method_labels)


def _cells_of(runs_by_method: Mapping[str, Iterable[dict]]) -> tuple[list, list[str]]:
    """Table 1's generators (``params.model``, first-seen order) and method labels for some runs."""
    runs = {label: list(records) for label, records in runs_by_method.items()}
    generators = list(dict.fromkeys(r.get("params", {}).get("model") for records in runs.values() for r in records))
    return generators, list(runs)


def _answers_by_pair(records: Iterable[dict]) -> dict[tuple, dict]:
    """{(model, reward): {prompt_id: (prompt, best response text)}} over the answered records."""
    answers: dict[tuple, dict] = {}
    for record in records:
        text = best_response_text(record)
        if text is None:
            continue
        params = record.get("params", {})
        pair = answers.setdefault((params.get("model"), params.get("reward")), {})
        pair[record["prompt_id"]] = (record["prompt"], text)
    return answers


def _mean_length(answers: Iterable[tuple]) -> float:
    lengths = [len(text) for _, text in answers]
    return sum(lengths) / len(lengths) if lengths else math.nan


def _slug(text: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", text).strip("_")


def _write_annotations(result: WinrateResult, folder: Path, generator: str, label: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(f'{generator}__{label}')}.json"
    annotations = result.annotations.assign(judge=result.summary["judge"])
    annotations.to_json(path, orient="records", indent=1, force_ascii=False)
    return path
