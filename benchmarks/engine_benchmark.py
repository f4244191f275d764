"""Engine benchmark: tokens/s of specrej's engine vs Hugging Face `generate()`, measured in one run.

    python benchmarks/engine_benchmark.py [--model default] [--dtype float32] [--batch-sizes 1,16,64,256]

For each batch size and sampling setting both engines sample exactly --new-tokens tokens per row
from the same prompt (stop tokens disabled, HF with min_new_tokens), after a warm-up. Also:
- the machine's matmul peak (GFLOP/s) in the same dtype, and the fraction of it each engine
  reaches, counting 2 x parameters FLOPs per decoded token;
- the cost of `prune` (halving the batch after --new-tokens tokens) vs re-prefilling the
  survivors' prompt + tokens, which is what an engine without an in-place cache prune pays.
Nothing here is a test: it prints what it measured, and the command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from specrej.api import load_engine
from specrej.decoding import Rollout
from specrej.sampling import SamplingParams

PROMPT = "Write a short story about a robot who learns to paint."
SAMPLINGS = {"T=1": SamplingParams(), "T=0.7,top_p=0.9,top_k=50": SamplingParams(temperature=0.7, top_p=0.9, top_k=50)}


def matmul_peak_gflops(dtype: torch.dtype, size: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    tic = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * size**3 * reps / (time.perf_counter() - tic) / 1e9


def time_engine(engine, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
    """Seconds for prefill + `new_tokens` tokens for each of `rows` rows."""
    params = SamplingParams(sampling.temperature, sampling.top_p, sampling.top_k, new_tokens)
    tic = time.perf_counter()
    prompt = engine.prefill(prompt_ids)
    rollout = Rollout(engine, prompt, rows, new_tokens, params, torch.Generator().manual_seed(0))
    while rollout.num_rows:
        rollout.step()
    return time.perf_counter() - tic


def time_hf(model, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
    ids = torch.tensor([prompt_ids] * rows)
    options = dict(do_sample=sampling.temperature > 0, temperature=sampling.temperature, top_p=sampling.top_p,
                   top_k=sampling.top_k, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    tic = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **options)
    elapsed = time.perf_counter() - tic
    assert out.shape[1] == len(prompt_ids) + new_tokens
    return elapsed


def prune_vs_reprefill(engine, prompt_ids, rows: int, new_tokens: int) -> tuple[float, float]:
    params = SamplingParams(max_new_tokens=new_tokens + 1)
    rollout = Rollout(engine, engine.prefill(prompt_ids), rows, new_tokens + 1, params, torch.Generator().manual_seed(0))
    for _ in range(new_tokens):
        rollout.step()
    halted = rollout.candidate_ids[::2].tolist()
    survivors = rollout.tokens[1::2, : rollout.length]
    tic = time.perf_counter()
    rollout.halt(halted)
    prune_s = time.perf_counter() - tic
    ids = torch.cat([torch.tensor([prompt_ids] * survivors.shape[0]), survivors], dim=1)
    tic = time.perf_counter()
    with torch.inference_mode():
        engine.model(ids, attention_mask=torch.ones_like(ids), use_cache=True)  # rebuilds their KV
    return prune_s, time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--json", help="also write the measurements here")
    args = parser.parse_args()

    engine = load_engine(args.model, dtype=args.dtype, device="cpu")
    engine.stop_token_ids = torch.tensor([-1])  # every row generates exactly --new-tokens tokens
    model, dtype = engine.model, engine.dtype
    prompt_ids = engine.encode_prompt(PROMPT)
    params = sum(p.numel() for p in model.parameters())  # tied embedding counted once: it is the lm_head GEMM
    peak = matmul_peak_gflops(dtype)
    print(f"# {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}; "
          f"model {args.model} ({params / 1e6:.1f}M params, {dtype}); prompt {len(prompt_ids)} tokens; "
          f"{args.new_tokens} new tokens per row")
    print(f"# matmul peak ({dtype}, 2048^3): {peak:.0f} GFLOP/s")
    print(f"{'batch':>5} {'sampling':<26} {'specrej tok/s':>13} {'HF tok/s':>9} {'ratio':>6} "
          f"{'specrej %peak':>13} {'HF %peak':>8}")
    rows_out = []
    for rows in (int(x) for x in args.batch_sizes.split(",")):
        for name, sampling in SAMPLINGS.items():
            time_engine(engine, prompt_ids, rows, 4, sampling)  # warm-up at this shape
            ours = rows * args.new_tokens / time_engine(engine, prompt_ids, rows, args.new_tokens, sampling)
            time_hf(model, prompt_ids, rows, 4, sampling)
            hf = rows * args.new_tokens / time_hf(model, prompt_ids, rows, args.new_tokens, sampling)
            flops = 2 * params / 1e9
            rows_out.append({"batch": rows, "sampling": name, "specrej_tok_s": ours, "hf_tok_s": hf,
                             "ratio": ours / hf, "specrej_frac_peak": ours * flops / peak,
                             "hf_frac_peak": hf * flops / peak})
            print(f"{rows:>5} {name:<26} {ours:>13.0f} {hf:>9.0f} {ours / hf:>5.2f}x "
                  f"{100 * ours * flops / peak:>12.0f}% {100 * hf * flops / peak:>7.0f}%", flush=True)
    prune_rows = max(int(x) for x in args.batch_sizes.split(","))
    prune_s, reprefill_s = prune_vs_reprefill(engine, prompt_ids, prune_rows, args.new_tokens)
    print(f"prune {prune_rows}->{prune_rows // 2} rows after {args.new_tokens} tokens: {prune_s * 1e3:.1f} ms; "
          f"re-prefill of the survivors: {reprefill_s * 1e3:.0f} ms; prune = {100 * prune_s / reprefill_s:.2f}% "
          f"of a re-prefill")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": sys.argv, "peak_gflops": peak, "dtype": str(dtype), "decode": rows_out,
                       "prune_s": prune_s, "reprefill_s": reprefill_s}, handle, indent=1)


if __name__ == "__main__":
    main()
