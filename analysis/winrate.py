"""Win-rate (WR) and length-controlled win-rate (LC-WR) against Bo-N_min: the paper's Table 1.

Everything goes through alpaca_eval 0.6.6 (``pip install -e '.[eval]'``): ``evaluate`` builds
the pairs, its ``PairwiseAnnotator`` randomises which output is shown first and undoes it, its
``logprob_parser`` turns the judge's answer-token log-probs into a preference, and its
``get_winrate`` / ``get_length_controlled_winrate`` compute the statistics.  Only the judge
differs between the real run and an offline one:

    judge="gpt4_turbo"     alpaca_eval's ``weighted_alpaca_eval_gpt4_turbo`` (the paper's judge);
                           needs ``OPENAI_API_KEY`` (or ``OPENAI_API_KEYS`` / ``OPENAI_CLIENT_CONFIG_PATH``)
    judge="local:<model>"  a local instruct model through ``specrej.models`` (``local`` =
                           ``local:default``, SmolLM2-135M-Instruct); ``analysis/judges/local_pairwise``
    judge="longest"        deterministic: the longer output wins, equal lengths draw (tests)
    judge=<callable>       ``f(instruction, output_a, output_b) -> 1 | 2 | 1.5 | p in [1, 2] | None``
                           (1: the first shown is better; None: no verdict), deterministic tests
    judge="auto"           ``gpt4_turbo`` when an OpenAI key is set, else ``local:default``

The summary and every Table 1 row record which judge produced them.  A small local model is a
weak judge: its numbers show that the pipeline runs, not the paper's quality claim.

Offline workarounds for alpaca_eval (each marked where it is applied):
- model and reference outputs are always passed as data (its default reference outputs are on
  the HF hub), with ``precomputed_leaderboard=None``, ``caching_path=None``, ``output_path=None``;
- ``get_length_controlled_winrate`` downloads ``df_gamed.csv`` even for the minimal GLM, which
  uses none of it; that download is replaced by an equivalent local table (``_offline_glm_tables``);
- the default GLM (``length_controlled_v1``) looks up AlpacaEval's 805 instruction difficulties
  by row position, meaningless for other prompt sets: the minimal GLM is the default here, and
  ``glm="length_controlled_v1"`` (with network) is only right for AlpacaEval's prompts in order;
- LC-WR needs >= 5 parsed annotations (5-fold CV) and is unreliable below ~20: under 5 it is NaN,
  under 20 the summary's ``lc_note`` says so.

This module never imports torch (the local judge lives in ``specrej.judge``, imported on use)
and imports alpaca_eval lazily, so ``analysis`` works without either.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.io import best_candidate, load_trajectories
from analysis.metrics import method_label

JUDGES_DIR = Path(__file__).parent / "judges"
AUTO = "auto"
API_JUDGE = "gpt4_turbo"
API_JUDGE_CONFIG = "weighted_alpaca_eval_gpt4_turbo"  # a folder of alpaca_eval's evaluators_configs
LOCAL_PREFIX = "local:"
DEFAULT_LOCAL_JUDGE = "local:default"
OFFLINE_JUDGE = "longest"
MINIMAL_GLM = "length_controlled_minimal"
MIN_LC_ANNOTATIONS = 5  # get_length_controlled_winrate's 5-fold cross-validation needs 5 groups
RELIABLE_LC_ANNOTATIONS = 20
INSTALL_HINT = "pip install -e '.[eval]'"
KEY_VARIABLES = ("OPENAI_API_KEY", "OPENAI_API_KEYS", "OPENAI_CLIENT_CONFIG_PATH")
TABLE1_INPUT_COLUMNS = [
    "generator", "reward", "method_label", "win_rate", "lc_win_rate", "standard_error", "lc_standard_error",
    "n", "n_unparsed", "avg_length", "reference_avg_length", "judge", "reference_label", "note",
]

PairJudge = Callable[[str, str, str], "float | None"]
_SENTINELS = re.compile(
    r"<<<specrej:instruction>>>(.*)<<<specrej:output_1>>>(.*)<<<specrej:output_2>>>(.*)<<<specrej:end>>>", re.DOTALL
)


class JudgeUnavailable(RuntimeError):
    """The requested judge cannot run here (no alpaca_eval, no API key, no loadable local model)."""


@dataclass
class WinrateResult:
    """``annotations``: one row per pair — instruction, output_1 / generator_1 (the reference),
    output_2 / generator_2 (the model), preference (1 reference better, 2 model better, 1.5 draw,
    values between for weighted judges, NaN when the verdict could not be parsed), annotator, the
    raw completion, and any extra input columns both sides share (e.g. prompt_id).
    ``summary``: see ``winrate``."""

    annotations: pd.DataFrame
    summary: dict


# --------------------------------------------------------------------------------------- judges
def longest_judge(instruction: str, output_a: str, output_b: str) -> float:
    """The deterministic offline judge: the longer output (in characters, stripped) wins; a draw
    when the lengths are equal.  Returns 1 (first shown), 2 (second shown) or 1.5."""
    a, b = len(output_a.strip()), len(output_b.strip())
    return 1.0 if a > b else 2.0 if b > a else 1.5


def api_key_present() -> bool:
    """Whether alpaca_eval's OpenAI client has credentials: one of ``KEY_VARIABLES`` is set."""
    return any(os.environ.get(name) for name in KEY_VARIABLES)


def resolve_judge(judge: str | PairJudge | None = AUTO) -> str | PairJudge:
    """The concrete judge for ``judge`` (``auto`` decided here); raises ``JudgeUnavailable`` for
    ``gpt4_turbo`` without a key or for ``None`` (no judge configured), and ``ValueError`` for an
    unknown name."""
    if judge is None:
        raise JudgeUnavailable("no judge configured")
    if callable(judge):
        return judge
    if judge == AUTO:
        return API_JUDGE if api_key_present() else DEFAULT_LOCAL_JUDGE
    if judge == API_JUDGE:
        if not api_key_present():
            raise JudgeUnavailable(
                "judge 'gpt4_turbo' needs an OpenAI API key: set OPENAI_API_KEY (or OPENAI_API_KEYS / "
                "OPENAI_CLIENT_CONFIG_PATH, as alpaca_eval reads them), or use judge 'auto' or 'local:<model>'"
            )
        return judge
    if judge == "local":
        return DEFAULT_LOCAL_JUDGE
    if judge == OFFLINE_JUDGE or (judge.startswith(LOCAL_PREFIX) and len(judge) > len(LOCAL_PREFIX)):
        return judge
    raise ValueError(f"unknown judge {judge!r}; choose 'auto', 'gpt4_turbo', 'local:<model>', 'longest' or a callable")


def judge_name(judge: str | PairJudge) -> str:
    return judge if isinstance(judge, str) else f"python:{getattr(judge, '__name__', type(judge).__name__)}"


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
    alpaca_main, _ = _import_alpaca_eval()
    models = _as_outputs(model_outputs, "model")
    references = _as_outputs(reference_outputs, "reference")
    model_name, reference_name = _single_generator(models, "model"), _single_generator(references, "reference")
    if model_name == reference_name:
        # alpaca_eval's LC-WR treats equal names as the baseline judged against itself (always 50)
        raise ValueError(f"model and reference outputs share the generator name {model_name!r}")
    ordered = len(models) == len(references) and models["instruction"].tolist() == references["instruction"].tolist()
    annotators_config, annotator_kwargs = _annotator_setup(judge)

    # Offline: outputs passed as data, no precomputed leaderboard, no annotation cache, nothing written.
    leaderboard, annotations = alpaca_main.evaluate(
        model_outputs=models,
        reference_outputs=references,
        annotators_config=annotators_config,
        name=model_name,
        output_path=None,
        precomputed_leaderboard=None,
        is_return_instead_of_print=True,
        fn_metric=functools.partial(_alpaca_metrics, glm=glm),
        annotation_kwargs={"is_ordered": ordered},
        caching_path=None,
        seed=seed,
        **annotator_kwargs,
    )
    annotations = pd.DataFrame(annotations)
    row = leaderboard.loc[model_name]
    n_parsed = int(row["n_total"])
    summary = {
        "judge": judge_name(judge),
        "annotator": Path(annotators_config).name,
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


def alpaca_eval_available() -> bool:
    """Whether alpaca_eval imports here (installed, with a setuptools that has pkg_resources)."""
    try:
        _import_alpaca_eval()
    except JudgeUnavailable:
        return False
    return True


def _import_alpaca_eval():
    """alpaca_eval's ``main`` and ``metrics`` modules, or ``JudgeUnavailable`` naming the install."""
    root = logging.getLogger()
    level = root.level
    try:
        with warnings.catch_warnings():  # alpaca_eval 0.6.6 imports pkg_resources (setuptools < 81)
            warnings.simplefilter("ignore")
            main = importlib.import_module("alpaca_eval.main")
            metrics = importlib.import_module("alpaca_eval.metrics")
    except ImportError as error:
        raise JudgeUnavailable(
            f"alpaca_eval cannot be imported ({error}); install the eval extra: {INSTALL_HINT} "
            "(alpaca-eval==0.6.6 with setuptools<81, which still ships pkg_resources)"
        ) from error
    finally:
        root.setLevel(level)  # alpaca_eval.annotators.base sets the root logger to INFO on import
    return main, metrics


def _annotator_setup(judge: str | PairJudge) -> tuple[str, dict]:
    """alpaca_eval annotators config and extra annotator kwargs (the completion function) for a judge.

    Our configs leave ``fn_completions`` out of their YAML and pass it here: alpaca_eval would
    otherwise receive it twice.  The local judge cannot use alpaca_eval's own
    ``huggingface_local_completions``: it passes ``load_in_8bit``, which transformers 5 rejects.
    """
    if judge == API_JUDGE:
        return API_JUDGE_CONFIG, {}
    if isinstance(judge, str) and judge.startswith(LOCAL_PREFIX):
        model = judge.removeprefix(LOCAL_PREFIX)
        try:
            from specrej.errors import SpecrejError
            from specrej.judge import load_judge, local_judge_completions
        except ImportError as error:
            raise JudgeUnavailable(f"judge {judge!r} needs torch and transformers ({error})") from error
        try:
            load_judge(model)  # fail here, with a JudgeUnavailable, rather than inside alpaca_eval
        except (SpecrejError, OSError) as error:
            raise JudgeUnavailable(f"judge {judge!r}: {error}") from error
        fn = functools.partial(local_judge_completions, model_name=model)
        return str(JUDGES_DIR / "local_pairwise"), {"fn_completions": fn}
    pair_judge = longest_judge if judge == OFFLINE_JUDGE else judge
    fn = functools.partial(_python_judge_completions, judge=pair_judge)
    return str(JUDGES_DIR / "offline_pairwise"), {"fn_completions": fn}


def _python_judge_completions(prompts: Sequence[str], judge: PairJudge, **_ignored) -> dict[str, list]:
    """alpaca_eval ``fn_completions`` for a Python judge: reads the two outputs back from the
    sentinel template and answers with log-probs of "1" / "2", as the model judges do."""
    completions = []
    for prompt in prompts:
        match = _SENTINELS.fullmatch(prompt.strip())
        verdict = judge(*match.groups()) if match else None
        completions.append(_verdict_completion(verdict))
    return {"completions": [c["text"] for c in completions], "completions_all": completions}


def _verdict_completion(verdict: float | None) -> dict:
    """A verdict in [1, 2] (1: first output better) as an OpenAI-style log-prob completion."""
    top = []
    if verdict is not None and 1 <= verdict <= 2:
        p_first = 2.0 - float(verdict)
        top = [{"token": token, "logprob": math.log(p)} for token, p in (("1", p_first), ("2", 1 - p_first)) if p > 0]
    best = max(top, key=lambda t: t["logprob"], default={"token": "", "logprob": None})
    return {"text": best["token"], "logprobs": {"content": [{**best, "top_logprobs": top}]}}


def _alpaca_metrics(annotations, glm: str) -> dict:
    """alpaca_eval's metrics plus ``lc_note``: ``get_length_controlled_winrate`` when it can be
    fitted, else ``get_winrate`` with LC-WR NaN — below 5 parsed verdicts (the GLM's 5-fold
    cross-validation cannot run) or when every pair has the same length difference (the GLM
    standardises it by its standard deviation, 0)."""
    _, metrics = _import_alpaca_eval()
    frame = pd.DataFrame(annotations)
    frame["preference"] = pd.to_numeric(frame["preference"], errors="coerce")
    parsed = frame["preference"].notna().sum()
    length_difference = frame["output_1"].str.len() - frame["output_2"].str.len()
    reason = None
    if parsed < MIN_LC_ANNOTATIONS:
        reason = f"LC-WR not computed: {parsed} parsed verdicts (needs >= {MIN_LC_ANNOTATIONS})"
    elif length_difference.nunique() < 2:
        reason = "LC-WR not computed: every pair has the same length difference"
    if reason:
        return {**metrics.get_winrate(frame), "length_controlled_winrate": math.nan, "lc_standard_error": math.nan,
                "lc_note": reason}
    with _offline_glm_tables(glm, len(frame)), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn's deprecations inside alpaca_eval's GLM fit
        # save_weights_dir=None: "auto" would write GLM weights into alpaca_eval's installed package
        result = metrics.get_length_controlled_winrate(
            frame, glm_name=glm, save_weights_dir=None, is_add_glm_preference_inplace=False
        )
    note = ""
    if parsed < RELIABLE_LC_ANNOTATIONS:
        note = f"LC-WR unreliable: {parsed} parsed verdicts (< {RELIABLE_LC_ANNOTATIONS})"
    return {**result, "lc_note": note}


@contextlib.contextmanager
def _offline_glm_tables(glm: str, n_rows: int):
    """Offline workaround: ``get_length_controlled_winrate`` always downloads ``df_gamed.csv`` from
    the hub and looks up ``instruction_difficulty`` for every row, even for the minimal GLM whose
    formula (``np.tanh(std_delta_len) + not_gamed_baseline - 1``) uses neither it nor the gamed
    rows (no regularisation).  For that GLM the download is replaced by a local table of the same
    columns with difficulty 0 for each row, which leaves the fit unchanged.  Other GLMs need the
    real table (network) and are left alone."""
    if glm != MINIMAL_GLM:
        yield
        return
    glm_module = importlib.import_module("alpaca_eval.metrics.glm_winrate")
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "df_gamed.csv"
        stand_in = pd.DataFrame({"model": "none", "index": range(n_rows), "instruction_difficulty": 0.0})
        stand_in.to_csv(table, index=False)
        original = glm_module.hf_hub_download
        glm_module.hf_hub_download = lambda *args, **kwargs: str(table)
        try:
            yield
        finally:
            glm_module.hf_hub_download = original


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
    """Trajectory records keyed by ``method_label`` (``Bo120``, ``SR α=0.5``), in first-seen order."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        params = record.get("params", {})
        n = params.get("n", params.get("init_batch_size"))
        label = method_label(record["method"], n, params.get("alpha", math.nan))
        groups.setdefault(label, []).append(record)
    return groups


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
            if record.get("method") == "bon":
                bon[label] = min(bon.get(label, math.inf), record.get("params", {}).get("n", math.inf))
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
    _import_alpaca_eval()
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
                     "n": len(reference), "n_unparsed": 0, "note": "reference: 50 by definition, not judged",
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
    note = f"not evaluated: {reason}"
    if runs_by_method is not None:
        runs = {label: list(records) for label, records in runs_by_method.items()}
        method_labels = method_labels or list(runs)
        generators = generators or list(dict.fromkeys(
            r.get("params", {}).get("model") for records in runs.values() for r in records))
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
    try:
        return table1_inputs(runs, reference_label, judge, **kwargs)
    except JudgeUnavailable as error:
        logging.getLogger(__name__).warning("Table 1 not evaluated: %s", error)
        return not_evaluated_table(str(error), runs)


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
    so every method is judged on the same prompts.  The ``generator`` column holds the given
    label; with ``annotations_dir``, each generator's annotations go to a sub-folder named after
    it.  The judge is checked once, before any judging (a local model is loaded then): when it
    cannot run here the result is ``not_evaluated_table`` over every generator and method, with
    ``attrs["status"]``, as from ``table1_or_not_evaluated``.  Other arguments: ``table1_inputs``.
    """
    records = {generator: [r for path in paths for r in load_trajectories(path)]
               for generator, paths in files_by_generator.items()}
    try:
        judge = resolve_judge(judge)
        _import_alpaca_eval()
        _annotator_setup(judge)
    except JudgeUnavailable as error:
        logging.getLogger(__name__).warning("Table 1 not evaluated: %s", error)
        labels = list(group_by_method(r for group in records.values() for r in group))
        return not_evaluated_table(str(error), generators=list(records), method_labels=labels)
    frames = []
    for generator, group in records.items():
        failed = {r["prompt_id"] for r in group if best_response_text(r) is None}
        answered = [r for r in group if r["prompt_id"] not in failed]
        if not answered:
            frame = not_evaluated_table("every prompt failed in at least one run", group_by_method(group))
        else:
            folder = None if annotations_dir is None else Path(annotations_dir) / _slug(generator)
            frame = table1_inputs(group_by_method(answered), reference_label, judge, annotations_dir=folder, **kwargs)
        frames.append(frame.assign(generator=generator))
    return pd.concat(frames, ignore_index=True).reindex(columns=TABLE1_INPUT_COLUMNS)


def write_table1(inputs: pd.DataFrame, path_stem: str | Path, decimals: int = 1) -> list[Path]:
    """Write ``<stem>.csv/.md/.tex`` (``analysis.tables``) and ``<stem>_inputs.csv`` (every row,
    with n, standard errors, judge and notes).  The CSV gets a ``status`` column per method (its
    rows' notes, e.g. "not evaluated: <reason>", else "evaluated by <judge>"); the Markdown ends
    with the judge and any notes, the LaTeX with the same as comments.  ``inputs`` may come back
    from a CSV: a "not evaluated" note shared by every row stands for ``attrs["status"]``."""
    from analysis.tables import append_notes, table1_win_rates, write_table

    table = table1_win_rates(inputs)
    paths = write_table(table, path_stem, decimals)
    table.assign(status=[_method_status(inputs[inputs["method_label"] == m]) for m in table.index]).to_csv(paths[0])
    details = Path(f"{path_stem}_inputs.csv")
    inputs.to_csv(details, index=False)
    judges = ", ".join(str(j) for j in inputs["judge"].dropna().unique()) or "none"
    notes = [f"- {row.generator} / {row.method_label}: {row.note}" for row in inputs.itertuples()
             if isinstance(row.note, str) and row.note and not row.note.startswith("reference")]
    status = inputs.attrs.get("status") or _shared_not_evaluated(inputs)
    lines = [f"\nJudge: {judges}. WR and LC-WR in percent against {_reference_of(inputs)}."]
    lines += [f"\n**{status}**"] if status else ([""] + notes if notes else [])
    append_notes(paths[1], paths[2], lines)
    return [*paths, details]


def _method_status(rows: pd.DataFrame) -> str:
    """One Table 1 row's status: its notes, led by "evaluated by <judge>" when it was judged."""
    notes = [note for note in dict.fromkeys(rows["note"]) if isinstance(note, str) and note]
    judges = [str(judge) for judge in dict.fromkeys(rows["judge"].dropna())]
    if judges and not any(note.startswith(("not evaluated", "reference")) for note in notes):
        notes = [f"evaluated by {', '.join(judges)}", *notes]
    return "; ".join(notes) or "not evaluated"


def _shared_not_evaluated(inputs: pd.DataFrame) -> str | None:
    notes = inputs["note"].unique()
    if len(notes) == 1 and isinstance(notes[0], str) and notes[0].startswith("not evaluated"):
        return notes[0]
    return None


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


def _reference_of(inputs: pd.DataFrame) -> str:
    labels = inputs["reference_label"].dropna().unique()
    return str(labels[0]) if len(labels) else "Bo-N_min"


def _slug(text: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", text).strip("_")


def _write_annotations(result: WinrateResult, folder: Path, generator: str, label: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(f'{generator}__{label}')}.json"
    annotations = result.annotations.assign(judge=result.summary["judge"])
    annotations.to_json(path, orient="records", indent=1, force_ascii=False)
    return path
