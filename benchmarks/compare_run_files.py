"""Compare every run file of two results/ directories record by record: the check that a change
to the engine or the methods left the outputs as they were.

    python benchmarks/compare_run_files.py BEFORE/results AFTER/results

Records are compared as parsed JSON, ignoring what differs between any two runs (`timing`) and
the fields that newer versions add: the top-level flops, and every params field that the BEFORE
record does not have (params.setting, params.output_settings, params.settings_digest, a
setting's keys written flat, ...); those are listed. Every other field, every params field the
BEFORE record has included, must be equal. Prints the files in both, how many are identical,
each file that differs with the keys that do, the params fields only AFTER has, and the files
only one side has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

IGNORED = {"timing", "flops"}


def comparable(record: dict, params_kept: set | None = None) -> dict:
    """The record without IGNORED, its params restricted to `params_kept` (None: all)."""
    record = {key: value for key, value in record.items() if key not in IGNORED}
    params = record.get("params", {})
    record["params"] = {key: value for key, value in params.items() if params_kept is None or key in params_kept}
    return record


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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


def main(before: Path, after: Path) -> int:
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
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
