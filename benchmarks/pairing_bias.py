"""How far a study's recorded compute leans when its jobs run in pairs: one Best-of-16 shard and
one SR job of the default study, run with the study's own options, alone (one after the other)
and side by side, their recorded CPU seconds (`timing.compute_s`, summed over the prompts) and
SR's cost in Best-of-16 shards either way. The calibration is taken alone, so the modelled
headline is the dedicated-machine one; this prints how far the recorded column departs from it.

    python benchmarks/pairing_bias.py [--prompts 8] [--alpha 0.5] [--repeats 1] [--configfile config/config.yaml]
        [--model MODEL] [--max-new-tokens N]

Needs the study's model fetched (make study, or specrej fetch-model default). Prints what it
measured and the commands; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from specrej.methods.sr import SPECULATIVE_REJECTION

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def study_commands(configfile: Path, alpha: float) -> tuple[list[str], list[str]]:
    """`specrej generate` options of the study's Best-of-16 shard 0 and of its SR job at `alpha`
    (the workflow's own job_options, on the merged and validated config)."""
    import job_options
    from snakemake.utils import validate

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    if configfile.resolve() != (ROOT / "config/config.yaml").resolve():
        config.update(yaml.safe_load(configfile.read_text()))
    validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))
    pair = config["pairs"][0]
    bon = job_options.reference_args(config, pair, n=16)
    name = SPECULATIVE_REJECTION.name
    sr = next(m for m in config["methods"] if m["name"] == name)
    params = {k: v[0] for k, v in sr["grid"].items()}
    params["alpha"] = alpha
    return shlex.split(bon), shlex.split(job_options.method_args(config, pair, name, params, sr.get("memory_budget")))


def run(jobs: list[tuple[str, list[str]]], folder: Path) -> dict[str, float]:
    """The jobs started together (one each: alone); each one's recorded CPU seconds over its prompts."""
    processes = {}
    for name, argv in jobs:
        out = folder / f"{name}-{time.monotonic_ns()}.jsonl"
        processes[name] = (subprocess.Popen([sys.executable, "-m", "specrej.cli.main", "generate", *argv,
                                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                            text=True), out)
    seconds = {}
    for name, (process, out) in processes.items():
        _, stderr = process.communicate()
        if process.returncode:
            raise SystemExit(f"{name} failed (exit {process.returncode}): {stderr.strip().splitlines()[-1:]}")
        records = [json.loads(line) for line in out.read_text().split("\n") if line.strip()]
        seconds[name] = sum(r["timing"]["compute_s"] for r in records)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="the study's first N prompts (default 8)")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--configfile", type=Path, default=ROOT / "config/config.yaml")
    parser.add_argument("--model", help="another generator than the study's (the jobs' other options kept)")
    parser.add_argument("--max-new-tokens", type=int, help="another response length than the study's")
    args = parser.parse_args()
    bon, sr = study_commands(args.configfile, args.alpha)
    overrides = (["--model", args.model] if args.model else []) + \
        (["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else [])
    bon, sr = bon + overrides, sr + overrides  # the CLI keeps an option's last value
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = json.loads((ROOT / "examples/study_prompts.json").read_text())[: args.prompts]
        prompts = folder / "prompts.json"
        prompts.write_text(json.dumps(source))
        bon, sr = [*bon, "--prompts", str(prompts)], [*sr, "--prompts", str(prompts)]
        print("commands: specrej generate " + " ".join(map(shlex.quote, bon)) + " --out ...")
        print("          specrej generate " + " ".join(map(shlex.quote, sr)) + " --out ...")
        alone, paired = {"shard": [], "method": []}, {"shard": [], "method": []}
        for _ in range(args.repeats):
            for name, argv in (("shard", bon), ("method", sr)):
                alone[name].append(run([(name, argv)], folder)[name])
            for name, value in run([("shard", bon), ("method", sr)], folder).items():
                paired[name].append(value)
    mean = {k: {n: sum(v) / len(v) for n, v in d.items()} for k, d in (("alone", alone), ("paired", paired))}
    print(f"\nrecorded CPU seconds over {args.prompts} prompts (mean of {args.repeats}):")
    print(f"{'':>14} {'Best-of-16 shard':>18} {'SR a=' + str(args.alpha):>12} {'SR / shard':>12}")
    for condition, values in mean.items():
        print(f"{condition:>14} {values['shard']:>18.1f} {values['method']:>12.1f} {values['method'] / values['shard']:>12.2f}")
    lean = (mean["alone"]["method"] / mean["alone"]["shard"]) / (mean["paired"]["method"] / mean["paired"]["shard"])
    print(f"\nside by side, the shard slows {mean['paired']['shard'] / mean['alone']['shard']:.2f}x and SR "
          f"{mean['paired']['method'] / mean['alone']['method']:.2f}x: the recorded column gives SR's speedup {lean:.2f}x "
          "its dedicated-machine value")


if __name__ == "__main__":
    main()
