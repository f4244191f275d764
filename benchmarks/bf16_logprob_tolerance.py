"""How far the log-prob reward moves when the generator runs in bfloat16 instead of float32.

Samples 16 responses per prompt with the bfloat16 engine (the default study's dtype), then
re-scores exactly those tokens with the float32 model, teacher-forced, and prints the absolute
difference of the mean token log-prob (the §5.3 reward) and whether Best-of-16 picks the same
response under both. Reproduce:

    .venv/bin/python benchmarks/bf16_logprob_tolerance.py [--prompts examples/study_prompts.json] [--count 6]
"""

import argparse

import numpy as np
import torch

from specrej import LogProbReward, SamplingParams, best_of_n, load_engine
from specrej.records.prompts import read_prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="examples/study_prompts.json")
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    bf16 = load_engine("default", dtype="bfloat16", device="cpu")
    fp32 = load_engine("default", dtype="float32", device="cpu").model
    differences, same_choice = [], 0
    prompts = read_prompts(args.prompts)[: args.count]
    for item in prompts:
        result = best_of_n(bf16, LogProbReward(), item.prompt, n=args.n, memory_budget=2**28,
                           sampling=SamplingParams(max_new_tokens=args.max_new_tokens), seed=1)
        prompt_ids = bf16.encode_prompt(item.prompt)
        scores_bf16 = np.array([c.final_score for c in result.candidates])
        scores_fp32 = []
        for c in result.candidates:
            with torch.no_grad():
                logprobs = fp32(torch.tensor([prompt_ids + c.token_ids])).logits[0].float().log_softmax(-1)
            positions = torch.arange(len(prompt_ids) - 1, len(prompt_ids) - 1 + c.num_tokens)
            scores_fp32.append(logprobs[positions, torch.tensor(c.token_ids)].mean().item())
        difference = np.abs(scores_bf16 - np.array(scores_fp32))
        differences += difference.tolist()
        same_choice += int(np.argmax(scores_bf16) == np.argmax(scores_fp32))
        print(f"{str(item.prompt_id):>24}: max |bf16 - fp32| = {difference.max():.4f} nats, "
              f"best-of-{args.n} choice {'same' if np.argmax(scores_bf16) == np.argmax(scores_fp32) else 'differs'}")
    print(f"over {len(differences)} responses: mean |diff| {np.mean(differences):.4f}, p95 "
          f"{np.percentile(differences, 95):.4f}, max {np.max(differences):.4f} nats; same Best-of-{args.n} "
          f"choice on {same_choice} of {len(prompts)} prompts")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
