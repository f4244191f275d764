"""The decode loop's speed before and after a change: two source trees timed in alternation.

    python benchmarks/decode_ab.py --before /path/to/old/checkout --after . [--model default]
        [--dtype bfloat16] [--batch-sizes 1,16,64] [--new-tokens 64] [--rounds 3] [--repeats 3]
        [--also states|certainty|none] [--compile off|on]

Each round runs one process per variant, in turn (before, after, and after with `--also`: every
layer's states collected, as ST-BoN asks for them, or each token's self-certainty kept, as the
self-certainty reward asks for it; none: no third variant), so a change in the machine's load
reaches every variant alike. --compile on times the compiled step (each tree's graphs compiled,
or loaded from $SPECREJ_CACHE, in its warm-up). A process imports specrej from its tree, prefills one prompt and samples --new-tokens
tokens for each batch size (stop tokens off), after a warm-up; its time is the best of
--repeats. Prints the median tokens/s of each variant over the rounds and the median of the
per-round ratios to "before" (a ratio within one round compares runs made seconds apart).
Nothing here is a test: it prints what it measured and the command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
tree, model, dtype, batches, new_tokens, repeats, also, compile = sys.argv[1:9]
sys.path.insert(0, tree)
import torch

from specrej.engine import decoding
import specrej
assert specrej.__file__.startswith(tree), specrej.__file__
from specrej.api import load_engine
from specrej.engine.sampling import SamplingParams

engine = load_engine(model, dtype=dtype, device="cpu", compile=compile)
engine.stop_token_ids = torch.tensor([-1])
prompt_ids = engine.encode_prompt("Write a short story about a robot who learns to paint.")
collect, certainty = also == "states", also == "certainty"

def timed(rows, n):
    params = SamplingParams(max_new_tokens=n)
    tic = time.perf_counter()
    prompt = decoding.prefill(engine.forward, prompt_ids, layer_states=True) if collect else decoding.prefill(engine.forward, prompt_ids)
    extra = {"token_certainty": True} if certainty else {}
    rollout = engine.rollout(prompt, rows, n, params, torch.Generator().manual_seed(0), **extra)
    rollout.collect_layer_states = collect
    while rollout.num_rows:
        rollout.step()
    return time.perf_counter() - tic

out = {}
for rows in map(int, batches.split(",")):
    timed(rows, 4)
    out[rows] = rows * int(new_tokens) / min(timed(rows, int(new_tokens)) for _ in range(int(repeats)))
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a checkout of the code before the change")
    parser.add_argument("--after", default=".", help="a checkout of the code after it (default: this one)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--also", default="states", choices=["states", "certainty", "none"],
                        help="the third variant: after with every layer's states collected, or with self-certainty "
                             "kept; none: only before and after")
    parser.add_argument("--compile", default="off", choices=["off", "on"], help="the eager step (off) or the compiled one")
    args = parser.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    variants = [("before", "none"), ("after", "none"), ("after", args.also)]
    names = ["before", "after", f"after, {'layer states' if args.also == 'states' else 'self-certainty'} on"]
    if args.also == "none":
        variants, names = variants[:2], names[:2]
    runs = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name, (tree, collect) in zip(names, variants):
            command = [sys.executable, "-c", CHILD, trees[tree], args.model, args.dtype, args.batch_sizes,
                       str(args.new_tokens), str(args.repeats), collect, args.compile]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode:
                sys.exit(f"{name} failed:\n{result.stderr[-2000:]}")
            runs[name].append(json.loads(result.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1} {name}: {runs[name][-1]}", file=sys.stderr)
    print(f"decode tokens/s, {args.model} {args.dtype}, {'compiled' if args.compile == 'on' else 'eager'} step, "
          f"{args.new_tokens} new tokens, median of {args.rounds} rounds (each the best of {args.repeats})")
    headers = ["after / before"] + ([f"{args.also} on / before"] if len(names) > 2 else [])
    print(f"{'batch':>6}" + "".join(f"{name:>24}" for name in names) + "".join(f"{h:>24}" for h in headers))
    for rows in args.batch_sizes.split(","):
        medians = [statistics.median(run[rows] for run in runs[name]) for name in names]
        ratios = [statistics.median(a[rows] / b[rows] for a, b in zip(runs[name], runs["before"])) for name in names[1:]]
        print(f"{rows:>6}" + "".join(f"{m:>24.0f}" for m in medians) + "".join(f"{r:>24.3f}" for r in ratios))
    print("command: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
