"""Compare every run file of two results/ directories record by record: the check that a change
to the engine or the methods left the outputs as they were.

    python benchmarks/compare_run_files.py BEFORE/results AFTER/results

Records are compared as parsed JSON, ignoring what differs between any two runs (`timing`) and
the fields that newer versions add (params.setting, params.output_settings,
params.settings_digest, and the top-level flops). Prints the files in both, how many are
identical, each file that differs with the keys that do, and the files only one side has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ADDED_PARAMS = {"setting", "output_settings", "settings_digest"}
IGNORED = {"timing", "flops"}


def comparable(record: dict) -> dict:
    record = {key: value for key, value in record.items() if key not in IGNORED}
    record["params"] = {key: value for key, value in record.get("params", {}).items() if key not in ADDED_PARAMS}
    return record


def read(path: Path) -> list[dict]:
    return [comparable(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


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
    differ, records = [], 0
    for relative in both:
        old, new = read(before / relative), read(after / relative)
        records += len(old)
        if old != new:
            differ.append((relative, differing_keys(old, new)))
    print(f"{len(both)} run files in both, {len(both) - len(differ)} identical; {records} records compared")
    for relative, keys in differ:
        print(f"DIFFERS {relative}: {', '.join(keys)}")
    print(f"only in {before}: {', '.join(map(str, sorted(files_before - files_after))) or 'none'}")
    print(f"only in {after}: {', '.join(map(str, sorted(files_after - files_before))) or 'none'}")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
