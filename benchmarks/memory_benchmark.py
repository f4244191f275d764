"""Memory benchmark: the computed KV peak, the measured peak and the budget, per method.

    python benchmarks/memory_benchmark.py [--model default] [--dtype float32] [--max-new-tokens 64]
                                          [--n 256 --batch-size 64] [--b-init 2048] [--prompts 1]

Cases: Best-of-N with n responses in batches of --batch-size, and SR (alpha 0.5) whose default
b_init is --b-init. Each gets the smallest budget whose KV capacity holds its batch (Best-of-N:
batch x max_new_tokens tokens; SR: b_init x --min-tokens), so the budget is what the batch needs.
The measured peak is `specrej.engine.budget.PeakMemory` around the prompt's run (CUDA: the allocator's
max_memory_allocated; CPU: budget.StorageTracker, the tensor storages ATen allocates), as each
run measures it (`measure_memory=True`).

Nothing here is a test: it prints what it measured, and the command that reproduces it.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

import specrej
from specrej.api import best_of_n, load_engine, speculative_rejection
from specrej.engine.budget import format_size, token_capacity
from specrej.engine.sampling import SamplingParams
from specrej.methods.bon import BEST_OF_N
from specrej.methods.sr import SPECULATIVE_REJECTION
from specrej.rewards.reward import LogProbReward

PROMPTS = ["Write a short story about a robot who learns to paint.",
           "Explain why the sky is blue to a ten-year-old."]


def budget_for(engine, prompt: str, slots: int) -> int:
    """The smallest budget (in whole tokens of KV) whose capacity holds `slots` generated tokens."""
    prompt_len = len(engine.encode_prompt(prompt))
    kv, layers = engine.kv_bytes_per_token, len(engine.layers)
    budget = kv * (prompt_len + slots)
    while token_capacity(budget, kv, prompt_len, layers) < slots:
        budget += kv
    return budget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--b-init", type=int, default=2048)
    parser.add_argument("--min-tokens", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--prompts", type=int, default=1, help=f"prompts per case (at most {len(PROMPTS)})")
    parser.add_argument("--methods", default=f"{BEST_OF_N.name},{SPECULATIVE_REJECTION.name}")
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args()
    methods = args.methods.split(",")

    engine = load_engine(args.model, dtype=args.dtype, device=args.device)
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens)
    reward = LogProbReward()
    rows = []
    for prompt in PROMPTS[: args.prompts]:
        if BEST_OF_N.name in methods:
            budget = budget_for(engine, prompt, args.batch_size * args.max_new_tokens)
            tic = time.perf_counter()
            result = best_of_n(engine, reward, prompt, n=args.n, batch_size=args.batch_size, memory_budget=budget,
                               sampling=sampling, measure_memory=True)
            peak = result.measured_peak_bytes
            rows.append((f"BoN n={args.n} batch={args.batch_size}", budget, result, peak, time.perf_counter() - tic))
        if SPECULATIVE_REJECTION.name in methods:
            budget = budget_for(engine, prompt, args.b_init * args.min_tokens)
            tic = time.perf_counter()
            result = speculative_rejection(engine, reward, prompt, alpha=args.alpha, memory_budget=budget,
                                           sampling=sampling, min_tokens=args.min_tokens, max_init_batch=args.b_init,
                                           measure_memory=True)
            peak = result.measured_peak_bytes
            name = f"SR b_init={result.params['init_batch_size']} alpha={args.alpha} ({len(result.rounds)} rounds)"
            rows.append((name, budget, result, peak, time.perf_counter() - tic))

    print(f"# {args.label}: specrej from {Path(specrej.__file__).parent}")
    print(f"# model {args.model} ({args.dtype}, {engine.device}), max_new_tokens {args.max_new_tokens}, "
          f"kv {engine.kv_bytes_per_token} B/token; torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}")
    header = ("case", "budget", "computed KV peak", "measured peak", "measured/budget", "margin", "time")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, budget, result, peak, seconds in rows:
        print(f"| {name} | {format_size(budget)} | {format_size(result.peak_kv_bytes)} | {format_size(peak)} | "
              f"{peak / budget:.2f} | {format_size(result.memory_margin_bytes)} | {seconds:.0f} s |")
    print("\ncommand: " + " ".join([Path(sys.executable).name, *sys.argv]))


if __name__ == "__main__":
    main()
