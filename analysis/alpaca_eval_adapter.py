"""alpaca_eval 0.6.6 driven offline: the only module that imports it (``pip install -e '.[eval]'``).

``judge_pairs`` runs ``alpaca_eval.main.evaluate``: it builds the pairs, its ``PairwiseAnnotator``
randomises which output is shown first and undoes it, its ``logprob_parser`` turns the judge's
answer-token log-probs into a preference, and its ``get_winrate`` /
``get_length_controlled_winrate`` compute the statistics.  Only the judge differs between the
real run and an offline one (``analysis.judge_registry``): ``annotator_setup`` picks the
annotators config (alpaca_eval's own for ``gpt4_turbo``, ours under ``analysis/judges/`` for
the local model and the Python judges) and the completion function.

Offline workarounds for alpaca_eval (each marked where it is applied):
- model and reference outputs are always passed as data (its default reference outputs are on
  the HF hub), with ``precomputed_leaderboard=None``, ``caching_path=None``, ``output_path=None``;
- ``get_length_controlled_winrate`` downloads ``df_gamed.csv`` even for the minimal GLM, which
  uses none of it; that download is replaced by an equivalent local table (``_offline_glm_tables``);
- the default GLM (``length_controlled_v1``) looks up AlpacaEval's 805 instruction difficulties
  by row position, meaningless for other prompt sets: the minimal GLM is the default here, and
  ``glm="length_controlled_v1"`` (with network) is only right for AlpacaEval's prompts in order;
- LC-WR needs >= 5 parsed annotations (5-fold CV) and is unreliable below ~20: under 5 it is NaN,
  under 20 the ``lc_note`` says so.

This module never imports torch (the local judge lives in ``specrej.rewards.judge``, imported on use)
and imports alpaca_eval lazily, so ``analysis`` works without either.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
import re
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.judge_registry import (
    API_JUDGE,
    LOCAL_PREFIX,
    OFFLINE_JUDGE,
    JudgeUnavailable,
    PairJudge,
    longest_judge,
    resolve_judge,
)

JUDGES_DIR = Path(__file__).parent / "judges"
API_JUDGE_CONFIG = "weighted_alpaca_eval_gpt4_turbo"  # a folder of alpaca_eval's evaluators_configs
MINIMAL_GLM = "length_controlled_minimal"
MIN_LC_ANNOTATIONS = 5  # get_length_controlled_winrate's 5-fold cross-validation needs 5 groups
RELIABLE_LC_ANNOTATIONS = 20
INSTALL_HINT = "pip install -e '.[eval]'"

_SENTINELS = re.compile(
    r"<<<specrej:instruction>>>(.*)<<<specrej:output_1>>>(.*)<<<specrej:output_2>>>(.*)<<<specrej:end>>>", re.DOTALL
)


def alpaca_eval_available() -> bool:
    """Whether alpaca_eval imports here (installed, with a setuptools that has pkg_resources)."""
    try:
        import_alpaca_eval()
    except JudgeUnavailable:
        return False
    return True


def import_alpaca_eval():
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


def usable_judge(judge: str | PairJudge | None) -> str | PairJudge:
    """The resolved ``judge`` once it is known to run here: a known name (``resolve_judge``),
    alpaca_eval imports, and a local model loads.  Raises ``JudgeUnavailable`` otherwise, before
    anything is judged."""
    judge = resolve_judge(judge)
    import_alpaca_eval()
    annotator_setup(judge)
    return judge


def annotator_setup(judge: str | PairJudge) -> tuple[str, dict]:
    """alpaca_eval annotators config and extra annotator kwargs (the completion function) for a
    resolved judge.

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
            from specrej.rewards.judge import load_judge, local_judge_completions
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


def judge_pairs(
    models: pd.DataFrame, references: pd.DataFrame, judge: str | PairJudge, *, ordered: bool, glm: str, seed: int,
) -> tuple[pd.Series, pd.DataFrame, str]:
    """Run alpaca_eval's ``evaluate`` on alpaca_eval outputs (``instruction``, ``output``, one
    ``generator`` per side) with a resolved judge.  ``ordered``: both sides list the same
    instructions in the same order (pairs by row; else alpaca_eval's inner join on instruction).

    Returns the model's leaderboard row (``get_winrate``'s statistics, ``n_total`` parsed
    verdicts, ``length_controlled_winrate`` / ``lc_standard_error``, NaN when not computed, and
    ``lc_note``), the per-pair annotations, and the annotators config's name."""
    alpaca_main, _ = import_alpaca_eval()
    name = str(models["generator"].iloc[0])
    annotators_config, annotator_kwargs = annotator_setup(judge)
    # Offline: outputs passed as data, no precomputed leaderboard, no annotation cache, nothing written.
    leaderboard, annotations = alpaca_main.evaluate(
        model_outputs=models,
        reference_outputs=references,
        annotators_config=annotators_config,
        name=name,
        output_path=None,
        precomputed_leaderboard=None,
        is_return_instead_of_print=True,
        fn_metric=functools.partial(_alpaca_metrics, glm=glm),
        annotation_kwargs={"is_ordered": ordered},
        caching_path=None,
        seed=seed,
        **annotator_kwargs,
    )
    return leaderboard.loc[name], pd.DataFrame(annotations), Path(annotators_config).name


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
    _, metrics = import_alpaca_eval()
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
