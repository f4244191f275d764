"""Compare every run file of two results/ directories record by record: the check that a change
to the engine or the methods left the outputs as they were, and, where outputs may differ by
design (a compiled decode step), by how much.

    python benchmarks/compare_run_files.py BEFORE/results AFTER/results [--tokens] [--summary] [--compute [TOL]]

Records are compared as parsed JSON, ignoring what differs between any two runs (`timing`) and
the fields that newer versions add: the top-level flops and steps, and every params field that the BEFORE
record does not have (params.setting, params.output_settings, params.settings_digest, a
setting's keys written flat, ...); those are listed. Every other field, every params field the
BEFORE record has included, must be equal. Prints the files in both, how many are identical,
each file that differs with the keys that do, the params fields only AFTER has, and the files
only one side has.

`--tokens`: over every record of the files in both, how many sampled tokens the two runs share:
each candidate's token ids are compared up to its first differing token, after which its
continuation (and, for SR, which rows are halted) is a different sample.
`--summary`: each estimate of AFTER's metrics/summary.csv that has a confidence interval (the
score improvement and the FLOP speedups; not the wall-time ones, which a slower or faster run
moves) against BEFORE's interval for the same method and setting.
`--compute [TOL]` (default 0.05): whether two runs of one study measured the same compute: each
method and setting's relative compute (× the smallest Best-of-N, summary.csv's relative_compute)
and the headline's speedup at equal score (metrics/headline.csv) in both, and AFTER / BEFORE; and
within each folder, settings of one name under two methods (SR and random-halting SR at one α: the
same FLOPs) against each other. A ratio further than TOL from 1 is marked.
Exit status: 1 if a file differs (with --tokens, --summary or --compute: only if an estimate falls outside
BEFORE's interval, or a compute ratio outside TOL), else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

IGNORED = {"timing", "flops", "steps"}
HEADLINE_KEY = ["pair", "method", "setting"]  # one row of metrics/headline.csv per method and setting
# summary.csv estimates with a prompt-bootstrap interval (`<name>_lo`, `<name>_hi`) that do not
# depend on wall time
SUMMARY_ESTIMATES = ("improvement", "relative_flops", "flops_speedup_vs_largest_bon")
SUMMARY_KEY = ["pair_key", "method", "setting"]


def comparable(record: dict, params_kept: set | None = None) -> dict:
    """The record without IGNORED, its params restricted to `params_kept` (None: all)."""
    record = {key: value for key, value in record.items() if key not in IGNORED}
    params = record.get("params", {})
    record["params"] = {key: value for key, value in params.items() if params_kept is None or key in params_kept}
    return record


def read(path: Path) -> list[dict]:
    # "\n" only: str.splitlines also splits at U+2028 and the like, which a response's text may hold
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def compared(before: list[dict], after: list[dict]) -> tuple[list[dict], list[dict], set[str]]:
    """Both sides made comparable (AFTER's params cut to the keys of the BEFORE record at the same
    place), and the params keys only AFTER has."""
    new_keys: set[str] = set()
    old, new = [comparable(r) for r in before], []
    for index, record in enumerate(after):
        kept = set(before[index].get("params", {})) if index < len(before) else None
        new_keys |= set(record.get("params", {})) - (kept or set())
        new.append(comparable(record, kept))
    return old, new, new_keys


def differing_keys(before: list[dict], after: list[dict]) -> list[str]:
    keys = set() if len(before) == len(after) else {"(number of records)"}
    for old, new in zip(before, after):
        keys |= {key for key in set(old) | set(new) if key != "params" and old.get(key) != new.get(key)}
        keys |= {f"params.{key}" for key in set(old["params"]) | set(new["params"])
                 if old["params"].get(key) != new["params"].get(key)}
    return sorted(keys)


def no_agreement() -> dict:
    """`token_agreement`'s counts before any record."""
    return {"candidates": 0, "identical": 0, "tokens": 0, "shared": 0, "first_difference": [], "best_changed": 0}


def token_agreement(before: list[dict], after: list[dict]) -> dict:
    """How far two runs of the same records sampled the same tokens.

    Records are paired by prompt_id and candidates by id. For each candidate in both, its tokens
    agree up to the first position where the token ids differ (or where the shorter one ends).
    Returns: candidates (in both), identical (same token ids throughout), tokens (the tokens
    BEFORE sampled for those candidates), shared (of them, those before each candidate's first
    difference), first_difference (per differing candidate, the position of its first differing
    token), best_changed (records whose best candidate id differs)."""
    after_by_prompt = {record["prompt_id"]: record for record in after}
    out = no_agreement()
    for old in before:
        new = after_by_prompt.get(old["prompt_id"])
        if new is None:
            continue
        out["best_changed"] += (old.get("best") or {}).get("candidate_id") != (new.get("best") or {}).get("candidate_id")
        new_tokens = {c["id"]: c["token_ids"] for c in new["candidates"]}
        for candidate in old["candidates"]:
            if candidate["id"] not in new_tokens:
                continue
            a, b = candidate["token_ids"], new_tokens[candidate["id"]]
            agree = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out["candidates"] += 1
            out["tokens"] += len(a)
            out["shared"] += agree
            if a == b:
                out["identical"] += 1
            else:
                out["first_difference"].append(agree)
    return out


def summary_against_intervals(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per method and setting in both summaries, and per SUMMARY_ESTIMATES column with an interval
    in BEFORE: BEFORE's estimate and interval, AFTER's estimate, and whether it lies inside."""
    merged = before.merge(after, on=SUMMARY_KEY, suffixes=("_before", "_after"))
    rows = []
    for _, row in merged.iterrows():
        for name in SUMMARY_ESTIMATES:
            low, high = row.get(f"{name}_lo_before"), row.get(f"{name}_hi_before")
            if low is None or pd.isna(low) or pd.isna(high):
                continue
            value = row[f"{name}_after"]
            rows.append({"method_label": row["method_label_before"], "estimate": name,
                         "before": row[f"{name}_before"], "before_lo": low, "before_hi": high,
                         "after": value, "inside": bool(low <= value <= high)})
    return pd.DataFrame(rows, columns=["method_label", "estimate", "before", "before_lo", "before_hi", "after", "inside"])


def print_token_report(before: Path, after: Path, files: list[Path]) -> None:
    print(f"\ntokens sampled alike (--tokens), per run file: candidates with identical token ids / in both; "
          f"tokens before each candidate's first difference / tokens {before} sampled; records whose best candidate changed")
    total = no_agreement()
    for relative in files:
        agreement = token_agreement(read(before / relative), read(after / relative))
        for key in total:
            total[key] += agreement[key]
        print(f"  {relative}: {agreement['identical']}/{agreement['candidates']} candidates; "
              f"{agreement['shared']}/{agreement['tokens']} tokens; best changed in {agreement['best_changed']}")
    firsts = sorted(total["first_difference"])
    where = (f"; a differing candidate's first differing token: median position {firsts[len(firsts) // 2]}, "
             f"earliest {firsts[0]}" if firsts else "")
    shared = total["shared"] / total["tokens"] if total["tokens"] else float("nan")
    print(f"all: {total['identical']}/{total['candidates']} candidates identical; {total['shared']}/{total['tokens']} "
          f"tokens ({shared:.1%}) sampled before their candidate's first difference{where}; "
          f"best candidate changed in {total['best_changed']} records")


def print_summary_report(before: Path, after: Path) -> bool:
    """Prints the estimates against the intervals; True if every one lies inside."""
    table = summary_against_intervals(pd.read_csv(before / "metrics/summary.csv"),
                                      pd.read_csv(after / "metrics/summary.csv"))
    print(f"\n{after}'s estimates against {before}'s confidence intervals (--summary):")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"{int(table['inside'].sum())} of {len(table)} inside")
    return bool(table["inside"].all())


def compute_agreement(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per method and setting in both summaries: relative_compute before and after, and their ratio."""
    merged = before.merge(after, on=SUMMARY_KEY, suffixes=("_before", "_after"))
    return pd.DataFrame({"method_label": merged["method_label_before"], "before": merged["relative_compute_before"],
                         "after": merged["relative_compute_after"],
                         "ratio": merged["relative_compute_after"] / merged["relative_compute_before"]})


def same_setting_pairs(summary: pd.DataFrame) -> pd.DataFrame:
    """Settings of one name run by two methods (e.g. SR and random-halting SR at one α), their
    relative compute and its ratio."""
    rows = []
    for (_, setting), group in summary.groupby(["pair_key", "setting"]):
        group = group.sort_values("method")
        for (_, first), (_, second) in zip(group.iloc[:-1].iterrows(), group.iloc[1:].iterrows()):
            rows.append({"setting": setting, "first": first["method_label"], "second": second["method_label"],
                         "first_compute": first["relative_compute"], "second_compute": second["relative_compute"],
                         "ratio": second["relative_compute"] / first["relative_compute"]})
    return pd.DataFrame(rows, columns=["setting", "first", "second", "first_compute", "second_compute", "ratio"])


def print_compute_report(before: Path, after: Path, tolerance: float) -> bool:
    """Prints the compute comparisons; True if every ratio lies within `tolerance` of 1."""
    summaries = {folder: pd.read_csv(folder / "metrics/summary.csv") for folder in (before, after)}
    marked = lambda ratio: "" if abs(ratio - 1) <= tolerance else "  OUTSIDE"  # noqa: E731
    within = True
    table = compute_agreement(summaries[before], summaries[after])
    print(f"\nrelative compute (x the smallest Best-of-N), {before} -> {after} (--compute, tolerance {tolerance:.0%}):")
    for _, row in table.iterrows():
        print(f"  {row['method_label']:<34} {row['before']:7.3f} {row['after']:7.3f}  x{row['ratio']:.3f}{marked(row['ratio'])}")
        within &= abs(row["ratio"] - 1) <= tolerance
    headlines = [folder / "metrics/headline.csv" for folder in (before, after)]
    if all(path.is_file() for path in headlines):
        old, new = (pd.read_csv(path) for path in headlines)
        merged = old.merge(new, on=HEADLINE_KEY, suffixes=("_before", "_after"))
        print("headline speedup at equal score (metrics/headline.csv compute_speedup; * the method's best setting):")
        for _, row in merged.iterrows():
            before_speedup, after_speedup = row["compute_speedup_before"], row["compute_speedup_after"]
            if pd.isna(before_speedup) and pd.isna(after_speedup):
                continue  # outside the Best-of-N range in both: no speedup to compare
            ratio = after_speedup / before_speedup
            best = "*" if row.get("best_before") else " "
            print(f"  {best}{row['method_label_before']:<33} {before_speedup:7.3f} {after_speedup:7.3f}  "
                  f"x{ratio:.3f}{marked(ratio)}")
            within &= bool(abs(ratio - 1) <= tolerance)
    for folder in (before, after):
        print(f"settings of one name under two methods, in {folder}:")
        for _, row in same_setting_pairs(summaries[folder]).iterrows():
            print(f"  {row['first']} {row['first_compute']:.3f} vs {row['second']} {row['second_compute']:.3f}: "
                  f"x{row['ratio']:.3f}{marked(row['ratio'])}")
            within &= abs(row["ratio"] - 1) <= tolerance
    return bool(within)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tokens", action="store_true", help="how many sampled tokens the two runs share")
    parser.add_argument("--summary", action="store_true",
                        help="AFTER's metrics/summary.csv estimates against BEFORE's confidence intervals")
    parser.add_argument("--compute", type=float, nargs="?", const=0.05, metavar="TOL",
                        help="whether the two runs measured the same compute (ratios within TOL of 1, default 0.05)")
    args = parser.parse_args(argv)
    before, after = args.before, args.after
    files_before = {p.relative_to(before) for p in before.glob("runs/**/*.jsonl")}
    files_after = {p.relative_to(after) for p in after.glob("runs/**/*.jsonl")}
    both = sorted(files_before & files_after)
    differ, records, added = [], 0, set()
    for relative in both:
        old, new, new_keys = compared(read(before / relative), read(after / relative))
        records += len(old)
        added |= new_keys
        if old != new:
            differ.append((relative, differing_keys(old, new)))
    print(f"{len(both)} run files in both, {len(both) - len(differ)} identical; {records} records compared")
    for relative, keys in differ:
        print(f"DIFFERS {relative}: {', '.join(keys)}")
    print(f"params fields only in {after}'s records (not compared): {', '.join(sorted(added)) or 'none'}")
    print(f"only in {before}: {', '.join(map(str, sorted(files_before - files_after))) or 'none'}")
    print(f"only in {after}: {', '.join(map(str, sorted(files_after - files_before))) or 'none'}")
    if args.tokens:
        # each generation job's own file (a merged file repeats its chunks' records, and Best-of-N's
        # larger N repeat the smaller's shards); a directory without chunk files: every file
        chunks = [f for f in both if f.name.startswith("chunk")]
        print_token_report(before, after, chunks or both)
    ok = True
    if args.summary:
        ok &= print_summary_report(before, after)
    if args.compute is not None:
        ok &= print_compute_report(before, after, args.compute)
    if args.summary or args.compute is not None:
        return 0 if ok else 1
    if args.tokens:
        return 0
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
