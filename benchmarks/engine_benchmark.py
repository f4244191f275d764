"""Engine benchmark: tokens/s of specrej's engine vs Hugging Face `generate()` and CTranslate2, in one run.

    python benchmarks/engine_benchmark.py [--model default] [--dtype auto] [--batch-sizes 1,16,64,256]
        [--forward own,unpacked,compiled,fallback] [--samplings "T=1;T=0.7,top_p=0.9,top_k=50"] [--peers hf,ct2-float32,ct2-int8]
        [--repeats 3] [--prompt-tokens N] [--llamacpp-converter PATH/convert_hf_to_gguf.py]

--samplings separates settings with `;` (a setting's own name holds commas).
--peers: the other engines timed beside this one (`engine_peers.py`). `hf` is Hugging Face `generate` on the same model
object. `ct2-float32`, `ct2-int8`, `ct2-int8_float32` are CTranslate2 (`pip install -e ".[bench]"`)
on the same weights, converted by its own `TransformersConverter` from the HF model directory the
engine loads (for the default GGUF model, its de-quantised conversion in the model cache) with that
compute type; CTranslate2 has no bfloat16 on a CPU, so its float32 is the row to compare, and its int8
rows are a different model (quantised weights), not a like-for-like comparison. CTranslate2 samples
with the same temperature, top-k and top-p (`sampling_topk=0`: no top-k cut, as top_k=0 here).
`llamacpp-bf16` and `llamacpp-f32` are llama.cpp through llama-cpp-python's low-level API (it has no
wheel on PyPI: `pip install llama-cpp-python` builds its sdist, 6.4 min on this 2-core machine), on
the same weights converted by llama.cpp's own `convert_hf_to_gguf.py` (given as
--llamacpp-converter; it ships in the sdist's vendor/llama.cpp, with the gguf-py it imports) to that
type. Every row is a sequence of one batch with its own KV stream, the prompt prefilled once and
copied into each (`llama_memory_seq_cp`), and llama.cpp's sampler chain draws each row's token with
the same temperature, top-k and top-p.

--model is anything `specrej generate --model` takes (a name such as `default` or `gemma3-270m`,
an id, a directory, a .gguf), or `shape:qwen3-0.6b`: a Qwen3 causal LM with Qwen3-0.6B's published
shape and random weights (decode speed does not depend on the weights' values), with the default
model's tokenizer for the prompt. --forward picks the engine's forward passes to time against HF:
`own` (the engine's fast path for the model's architecture, `engine.FAST_PATHS`, as the CLI runs
it; its row is named by that forward pass: `specrej (llama)`, `specrej (gemma3)`, or `specrej (hf)`
for a model that has none), `unpacked` (the same with `F.linear` on the weights as they are: the step before
`engine/linear.py` packed them), `compiled` (the same with `--compile on`, `engine/compiled.py`; its
first call, the compile included, is printed) and `fallback` (`hf_forward.HFForward`, the path every
other causal LM takes).

For each batch size and sampling setting every engine samples exactly --new-tokens tokens per row
from the same prompt (stop tokens disabled, HF with min_new_tokens), after a warm-up. The
engines are timed in turn within each of --repeats rounds and each time is the best of its
rounds, so a busy moment on the machine slows all of them alike rather than one. --dtype auto
is what the CLI picks (`specrej.models.loading.resolve_dtype`). Also:
- the machine's matmul peak (GFLOP/s) in the same dtype *at the GEMM shapes decode runs at that
  batch size* (every distinct linear layer of the model, rows x in @ in x out, best of several
  repetitions, the fastest shape taken as the peak), and the fraction of it each engine reaches,
  counting 2 x parameters FLOPs per decoded token;
- the cost of `prune` (halving the batch after --new-tokens tokens) vs re-prefilling the
  survivors' prompt + tokens, which is what an engine without an in-place cache prune pays
  (at the largest batch size; skipped, with a line saying so, when that is 1 row).
Nothing here is a test: it prints what it measured, and the command that reproduces it.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from engine_peers import CT2_COMPUTE_TYPES, LLAMACPP_TYPES, peer_timers, time_hf  # benchmarks/, beside this script
from specrej.api import load_engine
from specrej.engine import decoding
from specrej.engine.compiled import CompiledForward
from specrej.engine.engine import Engine
from specrej.engine.hf_forward import HFForward
from specrej.engine.sampling import SamplingParams
from specrej.models.loading import load_tokenizer, resolve_device, resolve_dtype

PROMPT = "Write a short story about a robot who learns to paint."
SAMPLINGS = {"T=1": SamplingParams(), "T=0.7,top_p=0.9,top_k=50": SamplingParams(temperature=0.7, top_p=0.9, top_k=50)}
SAMPLINGS_SEPARATOR = ";"  # a sampling's name holds commas
# published shapes of models whose speed is measured on random weights (config.json of each)
SHAPES = {"qwen3-0.6b": dict(model_type="qwen3", num_hidden_layers=28, hidden_size=1024, num_attention_heads=16,
                             num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=151936,
                             max_position_embeddings=40960, tie_word_embeddings=True, rope_theta=1000000.0,
                             rms_norm_eps=1e-6)}


def build_engine(model: str, dtype: str) -> Engine:
    """The engine for --model on the CPU; `shape:NAME` builds SHAPES[NAME] with random weights."""
    if not model.startswith("shape:"):
        return load_engine(model, dtype=dtype, device="cpu")
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(SHAPES[model.removeprefix("shape:")])
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    torch.manual_seed(0)
    torch_dtype = resolve_dtype(dtype, resolve_device("cpu"))
    hf_model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype).eval()
    return Engine(hf_model, load_tokenizer("default"))


def forward_family(engine: Engine) -> str:
    """The engine's forward pass by name: llama (`llama.LlamaForward`: Llama, Mistral, Qwen2, Qwen3),
    gemma3 (`gemma3.Gemma3Forward`), hf (the fallback). `forward_kind` says llama for Gemma 3 too."""
    return type(engine.forward).__name__.removesuffix("Forward").lower()


def forward_engines(engine: Engine, names: list[str]) -> dict[str, Engine]:
    """The engine once per forward pass in `names`, sharing one model: "own" (its own, as the CLI
    runs it), "unpacked" (its own with F.linear on the weights as they are, `engine/linear.py`),
    "compiled" (its own with --compile on, `engine/compiled.py`), "fallback" (HFForward)."""
    engines = {}
    for name in names:
        if name == "own":
            engines[f"specrej ({forward_family(engine)})"] = engine
        elif name in ("unpacked", "compiled"):
            forward = type(engine.forward)(engine.model, pack_weights=name != "unpacked")
            engines[f"specrej ({name})"] = engine.with_forward(CompiledForward(forward) if name == "compiled" else forward)
        elif name == "fallback":
            engines["specrej (fallback)"] = engine.with_forward(HFForward(engine.model))
        else:
            raise SystemExit(f"--forward: unknown forward pass {name!r} (own, unpacked, compiled, fallback)")
    return engines


def decode_gemm_shapes(engine) -> list[tuple[int, int]]:
    """(out, in) of every GEMM a decode step can run: the model's linear layers (HF's q, k, v, o,
    gate, up, down, lm_head) and the engine's fused q/k/v and gate/up weights (`llama.LlamaForward`)."""
    weights = [m.weight for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    for fused in ("qkv_weight", "gate_up_weight"):
        weights += getattr(engine.forward, fused, [])[:1]
    return sorted({tuple(w.shape) for w in weights})


def matmul_peak_gflops(shapes, rows: int, dtype: torch.dtype, repeats: int = 5, min_seconds: float = 0.05) -> float:
    """GFLOP/s of the fastest decode GEMM at `rows` rows: for every (out, in) in `shapes`,
    F.linear(x[rows, in], W[out, in]) is timed over enough iterations to last `min_seconds`, best of
    `repeats`; the peak is the best of all shapes. Measured at the shapes decode runs, so an engine
    cannot exceed it by running a shape the peak never saw; the best of several repetitions keeps a
    busy moment out of it."""
    best = 0.0
    with torch.inference_mode():
        for out_features, in_features in shapes:
            x, w = torch.randn(rows, in_features, dtype=dtype), torch.randn(out_features, in_features, dtype=dtype)
            torch.nn.functional.linear(x, w)
            iterations = 1
            while True:  # enough iterations that one timing lasts min_seconds
                tic = time.perf_counter()
                for _ in range(iterations):
                    torch.nn.functional.linear(x, w)
                if time.perf_counter() - tic >= min_seconds:
                    break
                iterations *= 2
            for _ in range(repeats):
                tic = time.perf_counter()
                for _ in range(iterations):
                    torch.nn.functional.linear(x, w)
                elapsed = time.perf_counter() - tic
                best = max(best, 2 * rows * in_features * out_features * iterations / elapsed / 1e9)
    return best


def time_engine(engine, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
    """Seconds for prefill + `new_tokens` tokens for each of `rows` rows."""
    params = SamplingParams(sampling.temperature, sampling.top_p, sampling.top_k, new_tokens)
    tic = time.perf_counter()
    prompt = decoding.prefill(engine.forward, prompt_ids)
    rollout = engine.rollout(prompt, rows, new_tokens, params, torch.Generator().manual_seed(0))
    while rollout.num_rows:
        rollout.step()
    return time.perf_counter() - tic


def prune_vs_reprefill(engine, prompt_ids, rows: int, new_tokens: int) -> tuple[float, float]:
    params = SamplingParams(max_new_tokens=new_tokens + 1)
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), rows, new_tokens + 1, params, torch.Generator().manual_seed(0))
    for _ in range(new_tokens):
        rollout.step()
    halted = rollout.candidate_ids[::2].tolist()
    survivors = rollout.tokens[1::2, : rollout.length]
    tic = time.perf_counter()
    rollout.halt(halted)
    prune_s = time.perf_counter() - tic
    ids = torch.cat([torch.tensor([prompt_ids] * survivors.shape[0], dtype=torch.long), survivors], dim=1)
    tic = time.perf_counter()
    with torch.inference_mode():
        engine.model(ids, attention_mask=torch.ones_like(ids), use_cache=True)  # rebuilds their KV
    return prune_s, time.perf_counter() - tic


def prompt_ids_of(engine: Engine, tokens: int | None) -> list[int]:
    """The benchmark prompt's ids; with `tokens`, its text repeated until the prompt has at least that many."""
    if tokens is None:
        return engine.encode_prompt(PROMPT)
    text = PROMPT
    while len(ids := engine.encode_prompt(text)) < tokens:
        text += " " + PROMPT
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="a model as --model takes it, or shape:qwen3-0.6b")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="auto: what the CLI picks on this machine")
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--forward", default="own", help="comma-separated: own, unpacked, compiled, fallback")
    parser.add_argument("--samplings", default=SAMPLINGS_SEPARATOR.join(SAMPLINGS),
                        help=f"separated by {SAMPLINGS_SEPARATOR!r}, of: {' | '.join(SAMPLINGS)}")
    parser.add_argument("--peers", default="hf", help="comma-separated: hf, " + ", ".join(
        f"ct2-{compute_type}" for compute_type in CT2_COMPUTE_TYPES) + " (CTranslate2), " + ", ".join(
        f"llamacpp-{outtype}" for outtype in LLAMACPP_TYPES) + " (llama.cpp)")
    parser.add_argument("--llamacpp-converter", help="llama.cpp's convert_hf_to_gguf.py, for the llamacpp-* peers")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, help="a prompt of at least this many tokens (default: the short prompt)")
    parser.add_argument("--repeats", type=int, default=3, help="each time is the best of this many rounds")
    parser.add_argument("--no-prune", action="store_true", help="skip the prune vs re-prefill measurement")
    parser.add_argument("--json", help="also write the measurements here")
    args = parser.parse_args()

    engine = build_engine(args.model, args.dtype)
    engine.stop_token_ids = torch.tensor([-1])  # every row generates exactly --new-tokens tokens
    engines = forward_engines(engine, args.forward.split(","))
    unknown = [name for name in args.samplings.split(SAMPLINGS_SEPARATOR) if name not in SAMPLINGS]
    if unknown:
        raise SystemExit(f"--samplings: unknown setting {unknown[0]!r}; separate settings with "
                         f"{SAMPLINGS_SEPARATOR!r}, each one of: {' | '.join(SAMPLINGS)}")
    samplings = {name: SAMPLINGS[name] for name in args.samplings.split(SAMPLINGS_SEPARATOR)}
    model, dtype = engine.model, engine.dtype
    prompt_ids = prompt_ids_of(engine, args.prompt_tokens)
    params = sum(p.numel() for p in model.parameters())  # tied embedding counted once: it is the lm_head GEMM
    peers = [name for name in args.peers.split(",") if name]
    if "hf" not in peers:
        raise SystemExit("--peers: hf must be one of them (every ratio is to HF generate)")
    workdir = Path(tempfile.mkdtemp(prefix="specrej-bench-"))
    timers = {label: functools.partial(time_engine, eng) for label, eng in engines.items()}
    timers["HF"] = functools.partial(time_hf, model)
    peer_times, converted = peer_timers(peers, args.model, engine, args.llamacpp_converter, workdir)
    timers.update(peer_times)
    print(f"# {' '.join(sys.argv)}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}; "
          f"model {args.model} ({model.config.model_type}, {params / 1e6:.1f}M params, {dtype}); "
          f"prompt {len(prompt_ids)} tokens; {args.new_tokens} new tokens per row")
    print(f"# each time: best of {args.repeats} rounds, engines timed in turn within a round; "
          f"matmul peak: the fastest decode GEMM at that batch size ({dtype}); "
          f"ct2 int8 % of peak is against the same {dtype} peak (a different kernel class: read it as a scale)")
    for label, seconds in converted.items():
        converter = "llama.cpp's convert_hf_to_gguf.py" if label.startswith("llamacpp") else "ctranslate2's TransformersConverter"
        print(f"# {label}: converted by {converter} in {seconds:.1f} s")
    print(f"{'batch':>5} {'peak GFLOP/s':>12} {'sampling':<26} {'engine':<20} {'tok/s':>7} {'HF tok/s':>9} "
          f"{'ratio':>6} {'%peak':>6}")
    rows_out, warm_up_s = [], {}
    flops = 2 * params / 1e9
    for rows in (int(x) for x in args.batch_sizes.split(",")):
        peak = matmul_peak_gflops(decode_gemm_shapes(engine), rows, dtype)
        for name, sampling in samplings.items():
            timings = {label: [] for label in timers}
            for label, timer in timers.items():  # warm-up at this shape (the first: a compiled step's compile)
                tic = time.perf_counter()
                timer(prompt_ids, rows, 4, sampling)
                if label not in warm_up_s:
                    warm_up_s[label] = time.perf_counter() - tic
                    if label == "specrej (compiled)":
                        print(f"# specrej (compiled): first call, compile included: {warm_up_s[label]:.1f} s", flush=True)
            for _ in range(args.repeats):
                for label, timer in timers.items():
                    timings[label].append(timer(prompt_ids, rows, args.new_tokens, sampling))
            hf = rows * args.new_tokens / min(timings["HF"])
            for label in timers:
                tok_s = rows * args.new_tokens / min(timings[label])
                rows_out.append({"batch": rows, "sampling": name, "engine": label, "peak_gflops": peak,
                                 "tok_s": tok_s, "hf_tok_s": hf, "ratio": tok_s / hf, "frac_peak": tok_s * flops / peak})
                print(f"{rows:>5} {peak:>12.0f} {name:<26} {label:<20} {tok_s:>7.0f} {hf:>9.0f} {tok_s / hf:>5.2f}x "
                      f"{100 * tok_s * flops / peak:>5.0f}%", flush=True)
    prune, prune_rows = {}, max(int(x) for x in args.batch_sizes.split(","))
    if not args.no_prune and prune_rows < 2:  # halving one row leaves no survivor to re-prefill
        print("prune: skipped (halving needs a batch of at least 2 rows; the largest of --batch-sizes is "
              f"{prune_rows})")
    elif not args.no_prune:
        prune_s, reprefill_s = prune_vs_reprefill(engine, prompt_ids, prune_rows, args.new_tokens)
        prune = {"prune_s": prune_s, "reprefill_s": reprefill_s}
        print(f"prune {prune_rows}->{prune_rows // 2} rows after {args.new_tokens} tokens: {prune_s * 1e3:.1f} ms; "
              f"re-prefill of the survivors: {reprefill_s * 1e3:.0f} ms; prune = {100 * prune_s / reprefill_s:.2f}% "
              f"of a re-prefill")
    shutil.rmtree(workdir)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": sys.argv, "model": args.model, "dtype": str(dtype), "repeats": args.repeats,
                       "prompt_tokens": len(prompt_ids), "ct2_convert_s": converted, "first_call_s": warm_up_s,
                       "decode": rows_out,
                       **prune}, handle, indent=1)


if __name__ == "__main__":
    main()
