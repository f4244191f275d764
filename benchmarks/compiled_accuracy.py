"""How far the engine's bfloat16 decode step, eager and compiled, is from the float32 model, on given responses.

    python benchmarks/compiled_accuracy.py RUN_FILE [--prompts 4] [--model default] [--threads 2]

RUN_FILE is a run file of the default model (a JSONL of records, e.g. a Best-of-N shard's). For the
first --prompts records, every candidate's tokens are teacher-forced through the engine in
bfloat16 (the prompt's prefill, then one `forward_step` per token for all candidates at once),
once with the eager decode step and once compiled (`--compile on`'s one-graph step), and the
log-prob of each next token is compared with the float32 model's (one Hugging Face forward over
prompt + response). Prints, over all tokens, the absolute differences (mean, median, 90th
percentile) of eager and compiled from float32 and from each other, and the mean signed
differences (a bias). Nothing here is a test: it prints what it measured and the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from specrej.api import load_engine
from specrej.engine import decoding
from specrej.engine.compiled import CompiledForward


def forced_logprobs(forward, prompt_ids: list[int], responses: list[list[int]]) -> torch.Tensor:
    """[responses, longest] log-probs of each response's tokens under the forward pass `forward`
    (eager, or compiled) (positions past a response's end are padding)."""
    longest = max(len(r) for r in responses)
    prompt = decoding.prefill(forward, prompt_ids)
    cache = forward.new_cache()
    cache.share_prompt(prompt.state)
    cache.allocate(len(responses), longest)
    tokens = torch.tensor([r + [0] * (longest - len(r)) for r in responses])
    out = torch.zeros(len(responses), longest)
    with torch.inference_mode():
        hidden = prompt.hidden[None].expand(len(responses), -1)
        for pos in range(longest):
            out[:, pos] = forward.logits(hidden).log_softmax(-1).gather(-1, tokens[:, pos : pos + 1])[:, 0]
            if pos + 1 < longest:
                hidden = forward.forward_step(cache, tokens[:, pos : pos + 1], pos)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_file")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--model", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = Path(args.run_file).read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()][: args.prompts]
    engine = load_engine(args.model, dtype="bfloat16", device="cpu")
    reference = load_engine(args.model, dtype="float32", device="cpu").model
    eager = engine.forward
    compiled = CompiledForward(type(eager)(engine.model))
    diffs = {"eager": [], "compiled": []}
    between = []
    for record in records:
        prompt_ids = engine.encode_prompt(record["prompt"])
        responses = [c["token_ids"] for c in record["candidates"] if c["token_ids"]]
        forced = {"eager": forced_logprobs(eager, prompt_ids, responses),
                  "compiled": forced_logprobs(compiled, prompt_ids, responses)}
        for i, response in enumerate(responses):
            ids = torch.tensor([prompt_ids + response])
            with torch.inference_mode():
                logits = reference(ids).logits[0, len(prompt_ids) - 1 : -1].float()
            exact = logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None])[:, 0]
            n = len(response)
            for name in diffs:
                diffs[name] += (forced[name][i, :n] - exact).tolist()
            between += (forced["eager"][i, :n] - forced["compiled"][i, :n]).tolist()
        print(f"# {record['prompt_id']}: {len(responses)} responses", flush=True)

    def spread(values: list[float]) -> str:
        absolute = [abs(v) for v in values]
        return (f"mean {statistics.mean(absolute):.4f}, median {statistics.median(absolute):.4f}, "
                f"90th percentile {statistics.quantiles(absolute, n=10)[-1]:.4f}")

    print(f"# python {' '.join(sys.argv)}")
    print(f"{len(between)} tokens; |log-prob difference| in nats:")
    for name, values in diffs.items():
        print(f"  {name} bfloat16 - float32: {spread(values)}; mean signed {statistics.mean(values):+.4f}")
    print(f"  eager - compiled: {spread(between)}")


if __name__ == "__main__":
    main()
