"""Prefix scoring: the reward of the first tau tokens of every response (`specrej score-prefixes`).

For every complete candidate of every trajectory record and every decision token tau, the
prefix is cut at the generator's token boundaries (`token_ids[:tau]`), decoded with the
generator's tokenizer, and scored by the reward, which renders it with its own template. The
result is the *prefix table* that `analysis.correlation` consumes, one row per (prompt,
candidate, tau), with the columns of `io.PREFIX_COLUMNS`:

    prompt_id      str: the record's id as a string, so ids that mix ints and strings (or that
                   differ between files) keep one parquet type
    candidate_id   int: the candidate's `id` in the record
    tau            int: the decision token
    partial_score  float: reward of the first tau tokens; NaN/+inf count as -inf, as in the engine
    final_score    float: reward of the complete response
    num_tokens     int: length of the complete response in generator tokens
    finished_before_tau  bool: num_tokens <= tau, i.e. the prefix is the whole response; its
                   partial score is then the final score (as SR ranks complete responses)

Candidates that never completed (halted by SR, `complete` false) have no full response and so
no final score: they are left out, with one warning that counts them. Prefix studies normally
read Best-of-N runs, where every candidate is complete.

`final_score` comes from the record when its `params.reward` is the reward used here;
otherwise the full response is scored again with this reward. `logprob` prefixes are the mean
of the first tau recorded `token_logprobs` (stored rounded to 5 decimals) and need no model;
`self-certainty` prefixes the mean of the first tau `token_certainties` (recorded by a run whose
reward was self-certainty).
"""

from __future__ import annotations

import numbers
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..engine.sampling import check_int
from ..errors import SpecrejError
from ..records.io import PREFIX_COLUMNS, PREFIX_DTYPES, read_records
from . import GENERATOR_REWARDS
from .reward import Response, Reward, finite_scores

Decode = Callable[[list[list[int]]], list[str]]


def check_decision_tokens(decision_tokens: Iterable[int]) -> list[int]:
    """The decision tokens sorted and without repeats; every one must be a positive integer."""
    if isinstance(decision_tokens, (str, bytes)) or not isinstance(decision_tokens, Iterable):
        raise SpecrejError(f"--decision-tokens must be a list of positive integers, got {decision_tokens!r}")
    taus = list(decision_tokens)
    if not taus:
        raise SpecrejError("--decision-tokens: no decision tokens given; pass e.g. --decision-tokens 8,16,32")
    bad = [t for t in taus if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1]
    if bad:
        raise SpecrejError(f"--decision-tokens must be positive integers, got {', '.join(map(str, bad[:5]))}"
                           + (", ..." if len(bad) > 5 else ""))
    return sorted({int(t) for t in taus})


def score_prefixes(records: Iterable[dict], reward: Reward, decision_tokens: Iterable[int],
                   decode: Decode | None = None, *, reward_name: str | None = None,
                   progress: bool = False) -> pd.DataFrame:
    """The prefix table (see the module docstring) of `records` under `reward`.

    `decode` turns lists of generator token ids into texts (the generator tokenizer's
    `batch_decode(..., skip_special_tokens=True)`, as the engine does); it may be None only for
    the rewards that read the generator's numbers instead of text (`GENERATOR_REWARDS`).
    `reward_name` (default `reward.name`) is compared with each record's `params.reward` to decide
    whether its final scores can be reused. Error records are skipped. One `reward.score` call per prompt scores
    all of its prefixes (grouped by tau, so a reward model pads little) and any final responses.
    """
    taus = check_decision_tokens(decision_tokens)
    text_free = getattr(reward, "name", None) in GENERATOR_REWARDS
    if decode is None and not text_free:
        raise SpecrejError(f"reward {getattr(reward, 'name', reward)!r} scores text: prefixes must be decoded with "
                           "the generator's tokenizer (pass --model, or decode=)")
    reward_name = reward_name if reward_name is not None else getattr(reward, "name", None)
    records = [r for r in records if "error" not in r]
    rows: list[dict] = []
    skipped = 0
    for record in tqdm(records, desc="score-prefixes", unit="prompt", disable=not progress):
        prompt_rows, halted = _score_record(record, reward, taus, decode, text_free, reward_name)
        rows += prompt_rows
        skipped += halted
    if skipped:
        warnings.warn(f"left out {skipped} candidates that never completed (halted): they have no final score",
                      stacklevel=2)
    return pd.DataFrame(rows, columns=list(PREFIX_COLUMNS)).astype(PREFIX_DTYPES)


def _score_record(record: dict, reward: Reward, taus: list[int], decode: Decode | None, text_free: bool,
                  reward_name: str | None) -> tuple[list[dict], int]:
    missing = [key for key in ("prompt_id", "prompt", "candidates") if key not in record]
    if missing:
        raise SpecrejError(f"not a trajectory record (no {', '.join(missing)}): keys {sorted(record)}")
    pid = record["prompt_id"]
    reuse_final = (record.get("params") or {}).get("reward") == reward_name
    candidates = []
    for c in record["candidates"]:
        if not c["complete"]:
            continue
        ids, logprobs = c.get("token_ids"), list(c.get("token_logprobs") or ())
        certainties = list(c.get("token_certainties") or ())
        if ids is None:
            raise SpecrejError(f"prompt {pid} candidate {c.get('id')}: no token_ids, so prefixes cannot be cut "
                               "at token boundaries")
        if text_free and len(logprobs) != len(ids):
            raise SpecrejError(f"prompt {pid} candidate {c.get('id')}: {len(logprobs)} token_logprobs for "
                               f"{len(ids)} tokens; the logprob reward needs one per token")
        final = c.get("final_score") if reuse_final else None
        candidates.append((c, list(ids), (logprobs, certainties), final))
    skipped = len(record["candidates"]) - len(candidates)

    # one reward call per prompt: prefixes shorter than the response, grouped by tau, then finals
    cuts = [(i, tau) for tau in taus for i, (_, ids, _, _) in enumerate(candidates) if tau < len(ids)]
    texts = decode([candidates[i][1][:tau] for i, tau in cuts]) if cuts and not text_free else [""] * len(cuts)
    responses = [Response(text, candidates[i][1][:tau], *(values[:tau] for values in candidates[i][2]))
                 for (i, tau), text in zip(cuts, texts)]
    rescore = [i for i, (_, _, _, final) in enumerate(candidates) if final is None]
    responses += [Response(candidates[i][0].get("text", ""), candidates[i][1], *candidates[i][2]) for i in rescore]
    scores = []
    if responses:
        scores, _ = finite_scores([float(s) for s in reward.score(record["prompt"], responses)], reward, pid,
                                  stacklevel=2)
    if len(scores) != len(responses):
        raise SpecrejError(f"reward {reward_name} returned {len(scores)} scores for {len(responses)} responses")
    partial = dict(zip(cuts, scores))
    finals = [final for _, _, _, final in candidates]
    for i, score in zip(rescore, scores[len(cuts):]):
        finals[i] = score

    rows = []
    for i, (c, ids, _, _) in enumerate(candidates):
        final = finite_scores([float(finals[i])], reward, pid, stacklevel=2)[0][0]
        for tau in taus:
            rows.append({"prompt_id": str(pid), "candidate_id": int(c.get("id", i)), "tau": tau,
                         "partial_score": partial.get((i, tau), final), "final_score": final,
                         "num_tokens": len(ids), "finished_before_tau": len(ids) <= tau})
    return rows, skipped


def write_parquet(frame: pd.DataFrame, out: str | os.PathLike) -> None:
    """Write `frame` to `out` atomically: a temporary file in the same folder, then os.replace."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(handle)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def generator_decoder(model: str, trust_remote_code: bool = False, revision: str | None = None) -> Decode:
    """`decode` for `score_prefixes` from the generator's tokenizer alone (no weights loaded), at
    the hub `revision` of a hub id."""
    from ..models.loading import load_tokenizer

    tokenizer = load_tokenizer(model, trust_remote_code, revision=revision)
    return lambda token_ids: tokenizer.batch_decode(token_ids, skip_special_tokens=True)


def _recorded_generator(records: list[dict], path: Path) -> tuple[str, str | None]:
    """The generator the records of `path` were made with, and its hub revision (None: not pinned)."""
    models = {((r.get("params") or {}).get("model"), (r.get("params") or {}).get("model_revision"))
              for r in records if "error" not in r}
    if len(models) != 1 or None in {model for model, _ in models}:
        shown_models = sorted(str(model) + (f"@{revision}" if revision else "") for model, revision in models)
        raise SpecrejError(f"cannot tell the generator of {path} from its records (models: {shown_models}); "
                           "pass --model")
    return models.pop()


def score_prefix_file(trajectories: str | os.PathLike, out: str | os.PathLike, *, reward: str,
                      decision_tokens: Iterable[int], model: str | None = None, dtype: str = "auto",
                      device: str = "auto", model_trust_remote_code: bool = False,
                      reward_trust_remote_code: bool = False, model_revision: str | None = None,
                      reward_revision: str | None = None, reward_batch_size: int = 16,
                      progress: bool = True) -> pd.DataFrame:
    """`specrej score-prefixes`: read a trajectories JSONL, score its prefixes, write the parquet.

    `model` (the generator, for its tokenizer) defaults to the records' `params.model`, at their
    `params.model_revision` unless `model_revision` is given; it is loaded only for rewards that
    score text. Each model runs its own code only when its `*_trust_remote_code` allows it, and
    loads at its `*_revision` (hub ids only). Bad input raises SpecrejError before any model loads.
    """
    from ..models.loading import check_revision
    from .reward import check_reward_revision, load_reward

    taus = check_decision_tokens(decision_tokens)
    check_int(reward_batch_size, "--reward-batch-size", 1)
    check_reward_revision(reward, reward_revision)
    if model is not None:
        check_revision(model, model_revision, "model")
    path = Path(trajectories)
    if not path.is_file():
        raise SpecrejError(f"trajectories file not found: {path}")
    records = read_records(path)
    if not records:
        raise SpecrejError(f"no complete records in {path}")
    if all("error" in r for r in records):
        raise SpecrejError(f"every record of {path} is an error record: nothing to score")
    scores_text = reward not in GENERATOR_REWARDS  # only then is the generator's tokenizer needed
    if scores_text and model is None:
        model, recorded_revision = _recorded_generator(records, path)
        model_revision = model_revision if model_revision is not None else recorded_revision
        check_revision(model, model_revision, "model")
    scorer = load_reward(reward, dtype=dtype, device=device, trust_remote_code=reward_trust_remote_code,
                         revision=reward_revision, batch_size=reward_batch_size)
    decode = generator_decoder(model, model_trust_remote_code, model_revision) if scores_text else None
    frame = score_prefixes(records, scorer, taus, decode, reward_name=reward, progress=progress)
    if frame.empty:
        raise SpecrejError(f"no complete candidates in {path}: nothing to score")
    write_parquet(frame, out)
    return frame
