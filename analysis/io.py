"""Read the engine's outputs into plain Python and pandas (no torch, no specrej import).

A trajectory record is one JSON object per line, one per prompt:

    prompt_id, prompt, method,
    params {model, reward, seed, setting {method, params, label}, display (``record_setting``), ...;
            n and shards for a record merged from shards, init_batch_size, min_tokens},
    best {candidate_id, text, score, num_tokens} (null when no response completed),
    worst {candidate_id, score} (lowest final score among complete candidates),
    candidates [{id, text, token_ids, token_logprobs, num_tokens, finished, final_score,
                 halted_round, round_scores, ...}],
    rounds [{decision_token, batch_before, batch_after, ranked, rule}],
    timing {total_s, generate_s, score_s, compute_s, threads}, tokens {generated, scored}, peak_kv_bytes,
    flops {prefill, generate, reward, total}, steps {prefill, decode, scored} (the engine's steps:
    ``specrej.records.step_profile``),

or, for a prompt that failed, prompt_id, prompt, method, params and an ``error`` string.
Only the fields used below are required; ``specrej.records.io`` owns the full schema.
"""

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from analysis._columns import require_columns
from analysis.correlation import PREFIX_COLUMNS
from analysis.metrics import perplexity
from analysis.settings import DISPLAY_COLUMNS, canonical_setting, declared_reference, record_display, with_display
from specrej.records.io import read_records  # torch-free
from specrej.records.step_profile import modelled_seconds  # torch-free

RUNS_COLUMNS = [
    "prompt_id", "method", "setting", "method_label", "n", "batch_size", "seed", "generator", "reward", "pair",
    "shards", "score", "worst_score", "num_tokens", "time_s", "work_s", "cpu_s", "modelled_s", "threads", "generate_s", "score_s",
    "tokens_generated", "tokens_scored", "peak_kv_bytes", "flops", "num_rounds", "perplexity", "num_candidates", "init_batch_size",
    "min_tokens", "first_decision_token", *DISPLAY_COLUMNS,
]


def load_trajectories(path: str | Path) -> list[dict]:
    """All records of a trajectory JSONL file, in file order (``specrej.records.io.read_records``: a
    file holding a prompt twice is refused, so no prompt can count twice in a metric)."""
    return read_records(path)


def load_prefix_table(path: str | Path) -> pd.DataFrame:
    """The prefix table parquet, checked against its column contract (see ``correlation``)."""
    prefixes = pd.read_parquet(path)
    require_columns(prefixes, PREFIX_COLUMNS, f"prefix table {path}")
    return prefixes


def best_responses_frame(records: Iterable[dict], calibration: Mapping | None = None) -> pd.DataFrame:
    """One row per answered record: the *runs* frame that ``analysis.metrics`` consumes.

    Columns (``RUNS_COLUMNS``): prompt_id, method, setting, method_label (the configuration:
    ``record_configuration``), n (Best-of-N's total N; for other methods the recorded
    ``params["init_batch_size"]``, else NaN), batch_size, seed, generator (``params["model"]``),
    reward, pair ("<generator> / <reward>"), shards (``params["shards"]``, default 1: the engine
    runs BoN batches one after another, so ``time_s`` already sums them), score, worst_score
    (the lowest final score among the record's complete candidates, ``worst_score``; eq. 8
    normalises by Bo-N_min's score − worst_score), num_tokens (of the best response), time_s
    (wall-clock ``timing.total_s``), work_s (``timing.compute_s``: the CPU or device seconds of the
    work, eq. 7's compute; NaN in a record made before it was recorded), cpu_s (the same measured
    seconds, kept beside whichever compute eq. 7 counts), modelled_s (``calibration`` applied to the
    record's steps, ``specrej.records.step_profile.modelled_seconds``, per shard as work_s is; NaN
    without a calibration or a step profile), threads (torch's CPU
    threads of the run; NaN likewise), generate_s, score_s, tokens_generated, tokens_scored, peak_kv_bytes, flops (the record's
    total FLOPs, ``record_flops``; NaN when not counted), num_rounds, perplexity (of the best
    response; NaN when its token_logprobs were not recorded), num_candidates (candidates the
    run sampled: ``num_candidates`` of a record merged from shards, which keeps only the chosen
    candidate, else the number of candidates; BoN runs each to completion, so
    tokens_generated / num_candidates is its mean response length in sampled tokens),
    init_batch_size, min_tokens (``params``, NaN when not recorded) and first_decision_token
    (``rounds[0]["decision_token"]``: where the first rejection came; NaN without rounds), then
    the configuration's display, DISPLAY_COLUMNS (``analysis.settings.with_display``).
    No column names a method's parameters: a method's study reads them from ``setting``
    (``analysis.settings.setting_params``).
    Records that failed or have no best response are left out; ``failed_prompts`` lists them.
    """
    rows = [_best_response_row(record, calibration) for record in records if _answered(record)]
    return with_display(pd.DataFrame(rows, columns=RUNS_COLUMNS))


def failed_prompts(records: Iterable[dict]) -> pd.DataFrame:
    """Columns prompt_id, method (the setting's method, as in the runs frame), error: one row
    per record without an answer."""
    rows = [
        {
            "prompt_id": record.get("prompt_id"),
            "method": _method_of(record),
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
    """Lowest final score among the record's complete candidates (``record["worst"]["score"]``:
    a record merged from shards keeps only the chosen candidate but the minimum over every
    shard there); NaN when there is none."""
    recorded = (record.get("worst") or {}).get("score")
    return float(recorded) if recorded is not None else math.nan


def record_setting(record: dict) -> dict:
    """The record's setting, ``params["setting"]``: ``{"method": NAME, "params": {...}, "label":
    str, "display": {...}}`` with the method's ``params["display"]`` ({} when the record has none:
    ``analysis.settings``).
    A record merged from shards (``specrej.records.shards.merge_shards``) holds the total N there."""
    params = record.get("params") or {}
    setting = params.get("setting")
    if not isinstance(setting, Mapping) or "method" not in setting:
        raise ValueError(f"record of prompt {record.get('prompt_id')!r} has no params['setting'] with a method; "
                         "it was written before settings were recorded: run it again")
    display = params.get("display") or {}
    return {"method": setting["method"], "params": dict(setting.get("params") or {}),
            "label": str(setting.get("label") or setting["method"]), "display": dict(display)}


def record_configuration(record: dict) -> tuple[str, float, str, str]:
    """(method, n, setting, label) of a record: the configuration key of ``analysis.metrics``.

    method is the setting's method name (``record_setting``), setting its parameters as canonical
    JSON text (``analysis.settings.canonical_setting``), label its display name ("Bo120", "SR
    α=0.5").  n is the reference method's N (the reference curve's x; the total of a record
    merged from shards), whose setting is ``{"n": N}``; for any other method the initial batch it recorded
    (``params["init_batch_size"]``, SR's b_init), else NaN — the analysis reads n only for the
    reference.
    """
    setting = record_setting(record)
    params = record.get("params") or {}
    if is_reference(setting):  # keyed by N alone: its batch size changes only how it is run
        n = params.get("n", setting["params"].get("n", math.nan))
        return setting["method"], n, canonical_setting({"n": n}), setting["label"]
    return setting["method"], params.get("init_batch_size", math.nan), canonical_setting(setting["params"]), \
        setting["label"]


def record_flops(record: dict) -> float:
    """The record's total FLOP count (``record["flops"]["total"]``, ``specrej.records.flops``; a
    record merged from shards holds the sum over its shards); NaN when it was not counted."""
    flops = record.get("flops") or {}
    total = flops.get("total")
    return float(total) if total is not None else math.nan


def is_reference(setting: dict) -> bool:
    """Whether a ``record_setting`` is of the reference method (its display, else its declaration)."""
    reference = record_display(setting)["reference"]
    return bool(reference) if reference is not None else declared_reference(setting["method"])


def _method_of(record: dict) -> str | None:
    setting = (record.get("params") or {}).get("setting")  # an error record may lack it
    return setting.get("method") if isinstance(setting, Mapping) else record.get("method")


def _answered(record: dict) -> bool:
    return "error" not in record and record.get("best") is not None


def modelled_compute(record: dict, calibration: Mapping | None) -> float:
    """Seconds of the record's steps on `calibration`, per shard (a merged Best-of-N record's
    total over its shards, divided by them, as ``timing.compute_s`` is); NaN without either."""
    steps = record.get("steps")
    if calibration is None or steps is None:
        return math.nan
    return modelled_seconds(steps, calibration)["total"] / (record.get("params") or {}).get("shards", 1)


def _best_response_row(record: dict, calibration: Mapping | None = None) -> dict:
    params, timing, tokens = record["params"], record.get("timing", {}), record.get("tokens", {})
    rounds = record.get("rounds") or []
    method, n, setting, label = record_configuration(record)
    best = best_candidate(record)
    logprobs = best.get("token_logprobs") if best else None
    generator, reward = params.get("model"), params.get("reward")
    return {
        "prompt_id": record["prompt_id"],
        "method": method,
        "setting": setting,
        "method_label": label,
        "n": n,
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
        "work_s": timing.get("compute_s", math.nan),
        "cpu_s": timing.get("compute_s", math.nan),
        "modelled_s": modelled_compute(record, calibration),
        "threads": timing["threads"] if isinstance(timing.get("threads"), int) else math.nan,  # shards that differ: a list
        "generate_s": timing.get("generate_s", math.nan),
        "score_s": timing.get("score_s", math.nan),
        "tokens_generated": tokens.get("generated"),
        "tokens_scored": tokens.get("scored"),
        "peak_kv_bytes": record.get("peak_kv_bytes"),
        "flops": record_flops(record),
        "num_rounds": len(rounds),
        "perplexity": perplexity(logprobs) if logprobs else math.nan,
        "num_candidates": record.get("num_candidates", len(record.get("candidates", []))),
        "init_batch_size": params.get("init_batch_size", math.nan),
        "min_tokens": params.get("min_tokens", math.nan),
        "first_decision_token": rounds[0].get("decision_token", math.nan) if rounds else math.nan,
        **record_display(record_setting(record)),
    }
