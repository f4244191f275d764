"""`torch.compile` of a decode step on this CPU: compile time and tokens/s, eager against compiled.

    python benchmarks/compile_decode_step.py [--model default] [--dtype bfloat16] [--batch-sizes 16,64]

The step is transformers' own decode forward over a static cache (`generate(cache_implementation=
"static")`), whose shapes are fixed for a batch size and a cache length: the model's forward is
compiled with `torch.compile(dynamic=False)` (one graph per batch size, the bucket a padded batch
would use), inductor on the CPU. Per batch size: the eager static-cache run, the first compiled run
(its time over a compiled run's is the compile time) and the best compiled run, each sampling
exactly --new-tokens tokens per row. A standalone measurement: nothing in the engine changes.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from specrej.api import load_engine

PROMPT = "Write a short story about a robot who learns to paint."


def generate_seconds(model, ids, new_tokens: int) -> float:
    tic = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, cache_implementation="static",
                             disable_compile=True)
    assert out.shape[1] == ids.shape[1] + new_tokens
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", default="16,64")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    engine = load_engine(args.model, dtype=args.dtype, device="cpu")
    model, prompt_ids = engine.model, engine.encode_prompt(PROMPT)
    print(f"# python {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model} {args.dtype}; "
          f"prompt {len(prompt_ids)} tokens, {args.new_tokens} new tokens per row", flush=True)
    eager_forward = model.forward
    for rows in (int(x) for x in args.batch_sizes.split(",")):
        ids = torch.tensor([prompt_ids] * rows)
        model.forward = eager_forward
        generate_seconds(model, ids, 2)  # warm-up
        eager = generate_seconds(model, ids, args.new_tokens)
        print(f"batch {rows}: eager static cache {rows * args.new_tokens / eager:.0f} tok/s", flush=True)
        model.forward = torch.compile(eager_forward, dynamic=False)
        first = generate_seconds(model, ids, args.new_tokens)
        print(f"batch {rows}: first compiled run {first:.1f} s", flush=True)
        compiled = min(generate_seconds(model, ids, args.new_tokens) for _ in range(2))
        print(f"batch {rows}: compiled {rows * args.new_tokens / compiled:.0f} tok/s "
              f"({eager / compiled:.2f}x eager); compile time {first - compiled:.1f} s", flush=True)


if __name__ == "__main__":
    main()
