"""Read the engine's outputs into plain Python and pandas (no torch, no specrej import).

A trajectory record is one JSON object per line, one per prompt:

    prompt_id, prompt, method ("bon" | "sr"),
    params {model, reward, seed, ...; BoN: n, batch_size; SR: alpha, init_batch_size, ...},
    best {candidate_id, text, score, num_tokens} (null when no response completed),
    worst {candidate_id, score} (lowest final score among complete candidates; newer records),
    candidates [{id, text, token_ids, token_logprobs, num_tokens, finished, final_score,
                 halted_round, round_scores, ...}],
    rounds [{decision_token, batch_before, batch_after, cutoff, ...}],
    timing {total_s, generate_s, score_s}, tokens {generated, scored}, peak_kv_bytes

or, for a prompt that failed, prompt_id, prompt, method, params and an ``error`` string.
Only the fields used below are required; ``specrej.io`` owns the full schema.
"""

import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis._columns import require_columns
from analysis.correlation import PREFIX_COLUMNS
from analysis.metrics import perplexity
from specrej.io import read_records  # torch-free


def load_trajectories(path: str | Path) -> list[dict]:
    """All records of a trajectory JSONL file, in file order (``specrej.io.read_records``: a
    file holding a prompt twice is refused, so no prompt can count twice in a metric)."""
    return read_records(path)


def load_prefix_table(path: str | Path) -> pd.DataFrame:
    """The prefix table parquet, checked against its column contract (see ``correlation``)."""
    prefixes = pd.read_parquet(path)
    require_columns(prefixes, PREFIX_COLUMNS, f"prefix table {path}")
    return prefixes


def best_responses_frame(records: Iterable[dict]) -> pd.DataFrame:
    """One row per answered record: the *runs* frame that ``analysis.metrics`` consumes.

    Columns: prompt_id, method, n (BoN's N; SR's initial batch, ``params["init_batch_size"]``,
    when the record has no ``n``), alpha (NaN for BoN), batch_size, seed, generator
    (``params["model"]``), reward, pair ("<generator> / <reward>"), shards
    (``params["shards"]``, default 1: the engine runs BoN batches one after another, so
    ``time_s`` already sums them), score, worst_score (the lowest final score among the
    record's complete candidates: ``worst["score"]``, or for older records without ``worst``
    the minimum over candidates with a final score; eq. 8 normalises by Bo-N_min's
    score − worst_score), num_tokens (of the best response), time_s,
    generate_s, score_s, tokens_generated, tokens_scored, peak_kv_bytes, num_rounds,
    perplexity (of the best response; NaN when its token_logprobs were not recorded),
    delta (adaptive SR's δ, ``params["rejection"]["delta"]`` of a run with rule "adaptive";
    NaN otherwise: an adaptive run's alpha is NaN too, its ``params["alpha"]`` being only the
    fallback for rounds without a fit), num_candidates (candidates the run sampled: ``num_candidates`` of a record merged from
    shards, which keeps only the chosen candidate, else the number of candidates; BoN runs
    each to completion, so tokens_generated / num_candidates is its mean response length in
    sampled tokens), and for SR init_batch_size, min_tokens (``params``) and
    first_decision_token (``rounds[0]["decision_token"]``: where the first rejection came),
    NaN for BoN or when not recorded.
    Records that failed or have no best response are left out; ``failed_prompts`` lists them.
    """
    return pd.DataFrame([_best_response_row(record) for record in records if _answered(record)])


def failed_prompts(records: Iterable[dict]) -> pd.DataFrame:
    """Columns prompt_id, method, error: one row per record without an answer."""
    rows = [
        {
            "prompt_id": record.get("prompt_id"),
            "method": record.get("method"),
            "error": record.get("error") or "no complete response",
        }
        for record in records
        if not _answered(record)
    ]
    return pd.DataFrame(rows, columns=["prompt_id", "method", "error"])


def best_candidate(record: dict) -> dict | None:
    """The candidate the method returned: ``best["candidate_id"]`` when recorded, else the
    never-halted candidate with the highest final score."""
    candidates = record.get("candidates", [])
    best_id = (record.get("best") or {}).get("candidate_id")
    if best_id is not None:
        return next((c for c in candidates if c.get("id") == best_id), None)
    finalists = [c for c in candidates if c.get("final_score") is not None and c.get("halted_round") is None]
    return max(finalists, key=lambda candidate: candidate["final_score"], default=None)


def worst_score(record: dict) -> float:
    """Lowest final score among the record's complete candidates; NaN when there is none.

    ``record["worst"]["score"]`` when the engine wrote it — a record merged from BoN shards
    (``specrej.io.merge_shards``) keeps only the chosen candidate but the minimum over all
    shards there — else computed from the candidates of older records.
    """
    recorded = (record.get("worst") or {}).get("score")
    if recorded is not None:
        return float(recorded)
    scores = [c["final_score"] for c in record.get("candidates", []) if c.get("final_score") is not None]
    return float(min(scores)) if scores else math.nan


def record_configuration(record: dict) -> tuple[str, int | None, float, float]:
    """(method, n, alpha, delta) of a record: the configuration key of ``analysis.metrics``
    (``method_label(*record_configuration(record))`` names it). n is BoN's N or SR's b_init;
    alpha is NaN for BoN and for adaptive SR (whose ``params["alpha"]`` is only the fallback of
    rounds without a fit); delta is adaptive SR's δ, else NaN."""
    params = record.get("params", {})
    rejection = params.get("rejection") or {}
    adaptive = record["method"] == "sr" and rejection.get("rule") == "adaptive"
    alpha = params.get("alpha", math.nan) if record["method"] == "sr" and not adaptive else math.nan
    return (record["method"], params.get("n", params.get("init_batch_size")), alpha,
            float(rejection["delta"]) if adaptive else math.nan)


def _answered(record: dict) -> bool:
    return "error" not in record and record.get("best") is not None


def _best_response_row(record: dict) -> dict:
    params, timing, tokens = record["params"], record.get("timing", {}), record.get("tokens", {})
    rounds = record.get("rounds") or []
    method, n, alpha, delta = record_configuration(record)
    best = best_candidate(record)
    logprobs = best.get("token_logprobs") if best else None
    generator, reward = params.get("model"), params.get("reward")
    return {
        "prompt_id": record["prompt_id"],
        "method": method,
        "n": n,
        "alpha": alpha,
        "delta": delta,
        "batch_size": params.get("batch_size", params.get("init_batch_size")),
        "seed": params.get("seed"),
        "generator": generator,
        "reward": reward,
        "pair": f"{generator} / {reward}",
        "shards": params.get("shards", 1),
        "score": record["best"]["score"],
        "worst_score": worst_score(record),
        "num_tokens": record["best"]["num_tokens"],
        "time_s": timing.get("total_s", math.nan),
        "generate_s": timing.get("generate_s", math.nan),
        "score_s": timing.get("score_s", math.nan),
        "tokens_generated": tokens.get("generated"),
        "tokens_scored": tokens.get("scored"),
        "peak_kv_bytes": record.get("peak_kv_bytes"),
        "num_rounds": len(rounds),
        "perplexity": perplexity(logprobs) if logprobs else math.nan,
        "num_candidates": record.get("num_candidates", len(record.get("candidates", []))),
        "init_batch_size": params.get("init_batch_size", math.nan),
        "min_tokens": params.get("min_tokens", math.nan),
        "first_decision_token": rounds[0].get("decision_token", math.nan) if rounds else math.nan,
    }
