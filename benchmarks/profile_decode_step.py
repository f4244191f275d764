"""Where a decode step's time goes: the engine's CPU time per op class, per step, at given batch sizes.

    python benchmarks/profile_decode_step.py [--model default] [--dtype bfloat16] [--batch-sizes 16,64]
        [--threads 1] [--new-tokens 64] [--compile off] [--kernels N]

Each batch size runs prefill + --new-tokens sampled tokens per row (stop tokens disabled, as the
engine benchmark does) once to warm up, then once under `torch.profiler`. Every op's *self* CPU time
is put in one class by its name (and, for softmax, by its input's last dimension: the vocabulary's
is the sampler's, any other is attention's):

- linear layers: `addmm` / `mm`, or oneDNN's linear on packed weights (q/k/v, o, gate/up, down, lm_head);
- attention: `bmm` and the attention's softmax;
- sampler: the vocabulary-wide ops (softmax, cumsum, searchsorted, logsumexp, gather, topk, sort, rand);
- copies and casts: `copy_`, `_to_copy`, `index`, `index_put_`, `cat`;
- elementwise and norms: `add`, `mul`, `silu`, `rms_norm`, `neg`, ... (what a compiled step fuses);
- other ops.

"Python and dispatch" is the step's wall time minus the ops' self times: the interpreter, the
dispatcher and the profiler's own cost per op (which inflates this row a little: the profiled step
is slower than an unprofiled one, printed beside it). The fraction of the decode-shape matmul peak
that the linear layers alone reach says how far the GEMMs themselves are from the machine's limit.
It prints what it measured, and the command.

With `--compile on` the compiled graph's own kernels are one opaque call to the profiler; `--kernels
N` lists the N slowest of them by name (inductor's `cpp.enable_kernel_profile`, which changes the
generated code: the graphs are compiled afresh in a temporary `$SPECREJ_CACHE`, the model linked
from the real one, so the user's compiled graphs are neither reused nor replaced).
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from specrej.api import load_engine
from specrej.engine import decoding
from specrej.engine.sampling import SamplingParams

PROMPT = "Write a short story about a robot who learns to paint."
LINEAR = {"aten::addmm", "aten::mm", "mkldnn::_linear_pointwise"}
ATTENTION = {"aten::bmm", "aten::baddbmm"}
SAMPLER = {"aten::cumsum", "aten::searchsorted", "aten::logsumexp", "aten::gather", "aten::topk", "aten::sort",
           "aten::uniform_", "aten::rand", "aten::isin", "aten::clamp_max", "aten::max", "aten::argmax"}
SOFTMAX = {"aten::_softmax", "aten::softmax"}
COPIES = {"aten::copy_", "aten::_to_copy", "aten::index", "aten::index_put_", "aten::cat", "aten::clone",
          "aten::contiguous", "aten::index_select", "aten::embedding"}
ELEMENTWISE = {"aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::silu", "aten::rms_norm",
               "aten::_fused_rms_norm", "aten::neg", "aten::sub", "aten::div", "aten::tanh", "aten::gelu",
               "aten::pow", "aten::rsqrt", "aten::mean", "aten::masked_fill", "aten::sin", "aten::cos"}
CLASSES = ("linear layers", "attention", "sampler", "copies and casts", "elementwise and norms", "other ops")


def op_class(name: str, shapes, vocab_size: int) -> str:
    if name in LINEAR:
        return "linear layers"
    if name in ATTENTION:
        return "attention"
    if name in SOFTMAX:
        last = shapes[0][-1] if shapes and shapes[0] else 0
        return "sampler" if last == vocab_size else "attention"
    if name in SAMPLER:
        return "sampler"
    if name in COPIES:
        return "copies and casts"
    if name in ELEMENTWISE:
        return "elementwise and norms"
    return "other ops"


def run(engine, prompt_ids, rows: int, new_tokens: int) -> None:
    params = SamplingParams(max_new_tokens=new_tokens)
    prompt = decoding.prefill(engine.forward, prompt_ids)
    rollout = engine.rollout(prompt, rows, new_tokens, params, torch.Generator().manual_seed(0))
    rollout.stop_token_ids = torch.tensor([-1])  # every row samples exactly new_tokens tokens
    while rollout.num_rows:
        rollout.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", default="16,64")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a study job runs with 1)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--compile", default="off", choices=["off", "on"], help="the engine's --compile")
    parser.add_argument("--kernels", type=int, default=0, metavar="N",
                        help="with --compile on: the N slowest of the graphs' generated kernels (compiled afresh)")
    args = parser.parse_args()
    if args.kernels and args.compile != "on":
        parser.error("--kernels lists a compiled graph's kernels: it needs --compile on")
    if args.kernels:
        profile_kernels_in_fresh_cache()
    torch.set_num_threads(args.threads)
    engine = load_engine(args.model, dtype=args.dtype, device="cpu", compile=args.compile)
    prompt_ids = engine.encode_prompt(PROMPT)
    vocab = engine.forward.vocab_size
    flops_per_token = 2 * sum(p.numel() for p in engine.model.parameters())
    print(f"# python {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model} {args.dtype}, "
          f"compile {args.compile}; prompt {len(prompt_ids)} tokens, {args.new_tokens} new tokens per row")
    for rows in (int(x) for x in args.batch_sizes.split(",")):
        run(engine, prompt_ids, rows, args.new_tokens)  # warm-up (and, compiled, the compile)
        tic = time.perf_counter()
        run(engine, prompt_ids, rows, args.new_tokens)
        plain = time.perf_counter() - tic
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            tic = time.perf_counter()
            run(engine, prompt_ids, rows, args.new_tokens)
            profiled = time.perf_counter() - tic
        per_class = defaultdict(float)
        for event in prof.key_averages(group_by_input_shape=True):
            per_class[op_class(event.key, event.input_shapes, vocab)] += event.self_cpu_time_total / 1e6
        steps = args.new_tokens
        linear = per_class["linear layers"]
        print(f"\nbatch {rows}: {rows * steps / plain:.0f} tok/s unprofiled ({plain / steps * 1e3:.1f} ms a step), "
              f"{profiled / steps * 1e3:.1f} ms a step profiled; the linear layers alone run at "
              f"{flops_per_token * rows * steps / linear / 1e9:.0f} GFLOP/s")
        print("| op class | ms per step | share of the profiled step |")
        print("|---|---|---|")
        for name in CLASSES:
            print(f"| {name} | {per_class[name] / steps * 1e3:.2f} | {per_class[name] / profiled:.0%} |")
        overhead = profiled - sum(per_class.values())
        print(f"| Python and dispatch | {overhead / steps * 1e3:.2f} | {overhead / profiled:.0%} |")
        top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
        print("top ops (self CPU ms per step, calls per step): " + ", ".join(
            f"{e.key.removeprefix('aten::')} {e.self_cpu_time_total / 1e3 / steps:.2f} ({e.count / steps:.0f})" for e in top))
        if args.kernels:
            print_kernels(prof, steps, args.kernels)


def profile_kernels_in_fresh_cache() -> None:
    """Inductor's kernels record themselves to the profiler; the graphs are compiled into a
    temporary $SPECREJ_CACHE whose models are links to the real cache's."""
    import torch._inductor.config

    from specrej.models.cache import cache_dir

    real = cache_dir()
    fresh = Path(tempfile.mkdtemp(prefix="specrej-kernel-profile-"))
    for entry in real.iterdir() if real.is_dir() else ():
        if entry.is_dir() and entry.name not in ("compiled", "inductor"):
            (fresh / entry.name).symlink_to(entry)
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)  # the links go, not what they point to
    os.environ["SPECREJ_CACHE"] = str(fresh)
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    torch._inductor.config.cpp.enable_kernel_profile = True
    print(f"# --kernels: graphs compiled afresh with kernel profiling in {fresh}")


def print_kernels(prof, steps: int, count: int) -> None:
    """The `count` slowest kinds of generated kernel, ms and calls per step. Inductor names a kernel
    graph_<graph>_cpp_fused_<its ops>_<index>; the layers' copies of one kernel differ in the index
    alone (a layer's own code gives each its kernel), so the kernels are summed by name without it."""
    per_kind = defaultdict(lambda: [0.0, 0])
    for e in prof.key_averages():
        if "cpp_fused" in e.key:
            kind = per_kind[re.sub(r"_\d+$", "", e.key)]
            kind[0] += e.self_cpu_time_total / 1e3 / steps
            kind[1] += e.count
    print(f"| generated kernel (slowest {min(count, len(per_kind))} of {len(per_kind)} kinds) | ms per step | calls per step |")
    print("|---|---|---|")
    for name, (ms, calls) in sorted(per_kind.items(), key=lambda item: -item[1][0])[:count]:
        print(f"| {name[:110]} | {ms:.2f} | {calls / steps:.0f} |")
    print(f"all generated kernels: {sum(ms for ms, _ in per_kind.values()):.2f} ms per step")

if __name__ == "__main__":
    main()
