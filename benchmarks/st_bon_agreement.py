"""How often ST-BoN's reward-free choice is the reward's choice, on the study's own Best-of-N samples.

    python benchmarks/st_bon_agreement.py RESULTS_DIR [--pair smollm2--logprob] [--model default]
        [--dtype bfloat16] [--tau-coeff 1.0]

For each prompt, the Best-of-N shard files (results/runs/<pair>/bon/shard*/chunk*.jsonl) hold
all N responses of the study's largest Best-of-N, each with its final reward. ST-BoN's vote is
run on those same N responses: c from their tokens (`truncation_point`, the first step at which
the prefixes are pairwise distinct or one emits a stop token), tau = max(1, int(tau_coeff c)),
and the votes over the running means of every layer's hidden states, which come from the
generator's own forward pass over prompt + response (`output_hidden_states`, teacher-forced; a
response that ended before the window keeps the mean of its own positions, as in the engine).
The winner is then compared with Best-of-N's choice (the highest reward): the share of prompts
where they agree (with a Clopper-Pearson interval; a uniformly random choice agrees 1/N of the
time) and the winner's reward rank among the N. Prints what it measured and the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
from scipy.stats import binomtest

from specrej.api import load_engine
from specrej.methods.bon import BEST_OF_N
from specrej.methods.st_bon import coe_features, consistency_scores, truncation_point, vote, window, winner
from specrej.records.io import read_records


def shard_responses(results: Path, pair: str) -> dict[str, tuple[str, list[dict]]]:
    """prompt_id -> (prompt, every candidate of every shard, shard order), from the shard files."""
    by_prompt: dict[str, dict[int, tuple[str, list[dict]]]] = defaultdict(dict)
    for path in sorted((results / "runs" / pair / BEST_OF_N.name).glob("shard*/chunk*.jsonl")):
        shard = int(path.parent.name.removeprefix("shard"))
        for record in read_records(path):
            if "candidates" in record:
                by_prompt[str(record["prompt_id"])][shard] = (record["prompt"], record["candidates"])
    return {pid: (shards[0][0], [c for k in sorted(shards) for c in shards[k][1]])
            for pid, shards in by_prompt.items() if len(shards) == max(map(len, by_prompt.values()))}


@torch.inference_mode()
def states_of(engine, prompt_ids: list[int], tokens: list[int]) -> torch.Tensor:
    """[L + 1, positions, H]: the prompt's last position, then each of `tokens` (teacher-forced)."""
    out = engine.model(input_ids=torch.tensor([prompt_ids + tokens]), output_hidden_states=True)
    return torch.stack([h[0, len(prompt_ids) - 1:] for h in out.hidden_states]).float()


def st_bon_choice(engine, prompt: str, candidates: list[dict], tau_coeff: float) -> dict:
    stop = int(engine.stop_token_ids[0]) if engine.stop_token_ids.numel() else -1
    length = max(c["num_tokens"] + c["finished"] for c in candidates)
    # each response's sampled tokens, its stop token included, padded with the stop token
    matrix = torch.tensor([c["token_ids"] + [stop] * (length - c["num_tokens"]) for c in candidates])
    c = truncation_point(matrix, engine.stop_token_ids.tolist())
    tau, stop_step = window(c, tau_coeff) if c is not None else (None, length)
    taken = min(stop_step, length)  # votes over positions 0..e-1 for e <= taken
    tau = min(tau if tau is not None else taken, taken)
    prompt_ids = engine.encode_prompt(prompt)
    # a row feeds its tokens until it ends (a stop token is sampled, never fed)
    states = [states_of(engine, prompt_ids, cand["token_ids"][: taken - 1]) for cand in candidates]
    votes = []
    for end in range(taken - tau + 1, taken + 1):
        means = torch.stack([s[:, :end].mean(dim=1) for s in states], dim=1)  # [L + 1, N, H]
        votes.append(vote(consistency_scores(coe_features(means))))
    return {"c": c, "tau": tau, "winner": winner(votes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--pair", default="smollm2--logprob")
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--tau-coeff", type=float, default=1.0)
    parser.add_argument("--json", type=Path, help="also write the per-prompt rows here")
    args = parser.parse_args()
    responses = shard_responses(args.results, args.pair)
    if not responses:
        sys.exit(f"no Best-of-N shard files under {args.results}/runs/{args.pair}/bon")
    engine = load_engine(args.model, dtype=args.dtype, device="cpu")
    rows = []
    for prompt_id, (prompt, candidates) in sorted(responses.items()):
        choice = st_bon_choice(engine, prompt, candidates, args.tau_coeff)
        scores = [c["final_score"] for c in candidates]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        rank = 1 + sum(s > scores[choice["winner"]] for s in scores)
        rows.append({"prompt_id": prompt_id, **choice, "bon_choice": best, "agree": choice["winner"] == best,
                     "winner_rank": rank, "n": len(candidates)})
        print(f"prompt {prompt_id}: c={choice['c']} tau={choice['tau']} winner={choice['winner']} "
              f"Bo{len(candidates)}'s choice={best} winner's reward rank {rank}/{len(candidates)}", file=sys.stderr)
    n = rows[0]["n"]
    agree = sum(r["agree"] for r in rows)
    interval = binomtest(agree, len(rows)).proportion_ci(0.95)
    ranks = [r["winner_rank"] for r in rows]
    print(f"ST-BoN (tau_coeff {args.tau_coeff}) on the study's Bo{n} samples, {len(rows)} prompts ({args.pair}):")
    print(f"  winner = Bo{n}'s choice on {agree}/{len(rows)} prompts = {agree / len(rows):.1%} "
          f"[95% CI {interval.low:.1%}, {interval.high:.1%}]; a random choice: {1 / n:.1%}")
    print(f"  winner's reward rank among {n}: median {statistics.median(ranks):g}, mean {statistics.mean(ranks):.1f} "
          f"(a random choice: mean {(n + 1) / 2:g})")
    print(f"  c: median {statistics.median(r['c'] for r in rows if r['c'] is not None):g} "
          f"(c unknown on {sum(r['c'] is None for r in rows)} prompts)")
    print("command: python " + " ".join(sys.argv))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
