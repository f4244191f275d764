"""What the default b_init rule changes on the CLI's CPU default.

`specrej generate --method sr` without --batch-size starts b_init = min(--max-init-batch, KV
capacity // --min-tokens) rows (the official code's cap of 1000); before, it was capacity //
min_tokens. On a CPU the default budget is a quarter of free RAM, at most 1 GiB. This runs SR
with both rules on the same prompts and seeds and prints b_init, the decision tokens, tokens
generated, seconds and the chosen response's reward. Reproduce:

    .venv/bin/python benchmarks/init_batch_rule.py [--prompts examples/study_prompts.json] [--count 2]
        [--memory-budget SIZE]
"""

import argparse
import time

import torch

from specrej import LogProbReward, SamplingParams, load_engine, speculative_rejection
from specrej.engine.budget import default_memory_budget, format_size, parse_size
from specrej.methods.base import MAX_ROWS
from specrej.records.prompts import read_prompts

UNCAPPED = MAX_ROWS  # the old rule: capacity // min_tokens, no cap (the largest row count a method takes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="examples/study_prompts.json")
    parser.add_argument("--count", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32", help="the CLI's CPU default")
    parser.add_argument("--memory-budget", type=parse_size, default=None,
                        help="the KV budget (default: the CLI's CPU default, a quarter of free RAM, at most 1 GiB)")
    args = parser.parse_args()
    engine = load_engine("default", dtype=args.dtype, device="cpu")
    budget = args.memory_budget or default_memory_budget(engine.device)
    print(f"budget {format_size(budget)} ({'given' if args.memory_budget else 'CPU default'}), alpha {args.alpha}, {args.max_new_tokens} new tokens, "
          f"{args.dtype}")
    print("| prompt | rule | b_init | decision tokens | tokens generated | seconds | reward |")
    print("|---|---|---|---|---|---|---|")
    for item in read_prompts(args.prompts)[: args.count]:
        for rule, cap in (("capacity // 8 (before)", UNCAPPED), ("min(1000, capacity // 8)", 1000)):
            start = time.perf_counter()
            result = speculative_rejection(engine, LogProbReward(), item.prompt, alpha=args.alpha,
                                           memory_budget=budget, max_init_batch=cap, seed=1,
                                           sampling=SamplingParams(max_new_tokens=args.max_new_tokens))
            seconds = time.perf_counter() - start
            print(f"| {item.prompt_id} | {rule} | {result.params['init_batch_size']} | "
                  f"{[r.decision_token for r in result.rounds]} | {result.tokens['generated']} | {seconds:.1f} | "
                  f"{result.best.final_score:.3f} |", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
