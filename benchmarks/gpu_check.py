"""The GPU check: one script, one report, made to fit 8 minutes on one H200 (`make gpu-check`).

    python benchmarks/gpu_check.py                  # CUDA, full sizes; writes results/gpu-check/report.{json,md}
    python benchmarks/gpu_check.py --tiny           # = --device cpu --size tiny: the test suite's run

Every model is built in code with random weights (the GPU machine has no hub and no GGUF), and
every section is timed and recorded on its own: a failed section is written to the report with
its error and the script exits 1 at the end; a section that cannot run here says why in one line.
Sections:
- fast_paths: the engine's own forward pass (Llama, Qwen3, Gemma 3) against transformers' full
  forward over the same tokens, bfloat16 on the device: the next-token logits after the prompt and
  after decoding past Gemma's sliding window, within BF16_ATOL;
- memory: Best-of-N (several batches) and SR under a --memory-budget through `api.run_one`, the
  allocator's measured peak (`budget.PeakMemory`) within budget + the engine's margin;
- engine_vs_hf: tokens/s of the engine and of HF `generate` on a Llama-3-8B-shaped model (random
  weights; tiny: a tiny Llama) at batch 64 and 256, timed in turn, best of --repeats;
- sr_vs_bon: SR's wall time (b_init up to 1000, alpha 0.5) against one Best-of-120 shard's (batch
  120) on the same model and prompt, as config/paper.yaml runs them;
- compiled_step: the engine's eager step against its own compiled one (`--compile on`) at batch 64,
  the compile time apart: what `--compile auto` should pick on this device; on CUDA also HF
  `generate` over a static cache compiled by transformers itself (`torch.compile`, mode
  "reduce-overhead": CUDA graphs) against the same with `disable_compile`. Skipped with its reason
  where compile cannot run (CUDA without Triton).
Nothing here is a test of numbers it cannot measure: the report holds what was measured and the command.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from specrej import LogProbReward, SamplingParams, load_engine
from specrej.api import run_one
from specrej.engine import decoding
from specrej.engine.engine import Engine
from specrej.methods.bon import BEST_OF_N
from specrej.methods.sr import SPECULATIVE_REJECTION

PROMPT = "Write a poem about the sea."
# bfloat16 logits of the same model by two orders of operations: about 3 bf16 ulps of |logits| < 4
# (tests/test_fast_paths.py measured at most 0.031 on these tiny shapes)
BF16_ATOL = 0.05
# CUDA's caching allocator rounds each block up to 512 bytes; a few dozen small tensors live at once
CUDA_ROUNDING = 2**16
CORPUS = ["The quick brown fox jumps over the lazy dog.", "Write a poem about the sea.",
          "Speculative rejection halts the lowest scoring responses early.", "Explain gravity to a child."] * 20
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0,
                 rms_norm_eps=1e-5, tie_word_embeddings=False)  # Meta-Llama-3-8B's config.json
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=True)  # SmolLM2-135M's config.json
TINY_LLAMA = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
# per size: the memory section's model, budget and runs; the throughput model and batches; SR vs BoN
SIZES = {
    "full": dict(memory_shape=SMOLLM2_135M, memory_budget=2**28, bon_n=120, bon_batch=None, sr_b_init=1000,
                 memory_tokens=64, speed_shape=LLAMA3_8B, batches=(64, 256), new_tokens=64,
                 paper_b_init=1000, paper_n=120, paper_tokens=128, paper_budget=2**36),
    "tiny": dict(memory_shape=TINY_LLAMA, memory_budget=2**20, bon_n=16, bon_batch=8, sr_b_init=64,
                 memory_tokens=12, speed_shape=TINY_LLAMA, batches=(2, 4), new_tokens=4,
                 paper_b_init=64, paper_n=8, paper_tokens=8, paper_budget=2**24),
}


def build_tokenizer():
    """A small byte-level BPE tokenizer trained in code (there is no hub on the GPU machine)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    return fast


def fast_path_config(model_type: str, vocab_size: int):
    """Tiny configs whose every feature the fast paths implement is on: GQA; Qwen3's q/k norms;
    Gemma 3's sliding window (8, shorter than prompt + decode), mixed layers, scaled rope, soft-capping."""
    import transformers as tf

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if model_type == "llama":
        return tf.LlamaConfig(num_hidden_layers=2, tie_word_embeddings=False, **common)
    if model_type == "qwen3":
        return tf.Qwen3Config(num_hidden_layers=2, head_dim=16, tie_word_embeddings=False, **common)
    return tf.Gemma3TextConfig(num_hidden_layers=3, head_dim=16, sliding_window=8, query_pre_attn_scalar=24,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                               rope_scaling={"rope_type": "linear", "factor": 4.0}, final_logit_softcapping=5.0,
                               **common)


def random_engine(shape: dict, tokenizer, device: torch.device, dtype: torch.dtype) -> Engine:
    """A Llama of `shape` with random weights, built on the device (no checkpoint written)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2, **shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    return Engine(model, tokenizer)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_engine(engine: Engine, prompt_ids, rows: int, new_tokens: int) -> float:
    """Seconds for prefill + exactly `new_tokens` tokens (T=1) for each of `rows` rows."""
    params = SamplingParams(max_new_tokens=new_tokens)
    synchronize(engine.device)
    tic = time.perf_counter()
    rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), rows, new_tokens, params,
                             torch.Generator(device=engine.device).manual_seed(0))
    while rollout.num_rows:
        rollout.step()
    synchronize(engine.device)
    return time.perf_counter() - tic


def time_hf(model, prompt_ids, rows: int, new_tokens: int, **options) -> float:
    """Seconds for HF `generate` of exactly `new_tokens` sampled tokens (T=1) for each of `rows` rows."""
    ids = torch.tensor([prompt_ids] * rows, device=model.device)
    synchronize(model.device)
    tic = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, **options)
    synchronize(model.device)
    assert out.shape[1] == len(prompt_ids) + new_tokens, f"HF generated {out.shape[1] - len(prompt_ids)} tokens"
    return time.perf_counter() - tic


# -- sections: each returns its record (measurements and "ok": whether its checks held) --------------

def check_fast_paths(device, size, tokenizer, workdir) -> dict:
    from transformers import AutoModelForCausalLM

    records, steps = {}, 12  # 12 tokens carry Gemma's decode past its sliding window of 8
    for model_type in ("llama", "qwen3", "gemma3_text"):
        path = workdir / f"fast-{model_type}"
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(fast_path_config(model_type, len(tokenizer)))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name:  # randomized norms: Gemma's (1 + w) and Qwen3's q/k norms are exercised
                    param.copy_(torch.randn_like(param) * 0.3 + (0 if model_type == "gemma3_text" else 1))
            model.get_output_embeddings().weight.mul_(4)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        engine = load_engine(str(path), dtype="bfloat16", device=str(device))
        engine.stop_token_ids = torch.tensor([-1], device=engine.device)
        prompt_ids = engine.encode_prompt(PROMPT)
        # room for one token more than are decoded: no row completes, so every row is compared after the last step
        rollout = engine.rollout(decoding.prefill(engine.forward, prompt_ids), 4, steps + 1, SamplingParams(max_new_tokens=steps + 1),
                                 torch.Generator(device=engine.device).manual_seed(0))
        errors = []
        for step in range(steps + 1):
            tokens = rollout.tokens[:, : rollout.length].tolist()
            with torch.inference_mode():
                reference = engine.model(torch.tensor([prompt_ids + row for row in tokens], device=engine.device))
            error = (engine.forward.logits(rollout.hidden).float() - reference.logits[:, -1].float()).abs().max().item()
            errors.append(error)
            if step < steps:
                rollout.step()
        records[model_type] = {"forward_kind": engine.forward_kind, "max_abs_logit_error": max(errors),
                               "after_prompt": errors[0], "after_last_step": errors[-1], "tolerance": BF16_ATOL,
                               "ok": engine.forward_kind == "llama" and max(errors) <= BF16_ATOL}
    return {"dtype": "bfloat16", "steps": steps, "models": records, "ok": all(r["ok"] for r in records.values())}


def check_memory(device, size, tokenizer, workdir) -> dict:
    engine = random_engine(size["memory_shape"], tokenizer, device, torch.float32 if device.type == "cpu"
                           else torch.bfloat16)
    engine.stop_token_ids = torch.tensor([-1], device=engine.device)
    budget, sampling = size["memory_budget"], SamplingParams(max_new_tokens=size["memory_tokens"])
    runs = {}
    for method, params in ((BEST_OF_N, {"n": size["bon_n"], "batch_size": size["bon_batch"]}),
                           (SPECULATIVE_REJECTION, {"alpha": 0.5, "max_init_batch": size["sr_b_init"]})):
        result = run_one(engine, LogProbReward(), PROMPT, method=method, sampling=sampling, memory_budget=budget,
                         measure_memory=True, **params)
        allowance = CUDA_ROUNDING if device.type == "cuda" else 0
        bound = budget + result.memory_margin_bytes + allowance
        runs[method.name] = {"params": {k: v for k, v in result.params.items() if isinstance(v, (int, float, str))},
                        "peak_kv_bytes": result.peak_kv_bytes, "measured_peak_bytes": result.measured_peak_bytes,
                        "memory_margin_bytes": result.memory_margin_bytes, "bound_bytes": bound,
                        "candidates": len(result.candidates), "rounds": len(result.rounds),
                        "wall_s": result.timing["total_s"],
                        "ok": result.measured_peak_bytes is not None and result.measured_peak_bytes <= bound}
    return {"budget_bytes": budget, "dtype": str(engine.dtype), "max_new_tokens": size["memory_tokens"],
            "runs": runs, "ok": all(r["ok"] for r in runs.values())}


def check_engine_vs_hf(device, size, tokenizer, workdir, repeats: int) -> dict:
    engine = random_engine(size["speed_shape"], tokenizer, device, torch.bfloat16)
    engine.stop_token_ids = torch.tensor([-1], device=engine.device)
    prompt_ids, new_tokens = engine.encode_prompt(PROMPT), size["new_tokens"]
    params = sum(p.numel() for p in engine.model.parameters())
    rows_out = []
    for rows in size["batches"]:
        time_engine(engine, prompt_ids, rows, 2)  # warm-up at this shape
        time_hf(engine.model, prompt_ids, rows, 2)
        times = {"engine": [], "hf": []}
        for _ in range(repeats):  # in turn within each round
            times["engine"].append(time_engine(engine, prompt_ids, rows, new_tokens))
            times["hf"].append(time_hf(engine.model, prompt_ids, rows, new_tokens))
        engine_tok_s, hf_tok_s = (rows * new_tokens / min(times[k]) for k in ("engine", "hf"))
        rows_out.append({"batch": rows, "engine_tok_s": engine_tok_s, "hf_tok_s": hf_tok_s,
                         "ratio": engine_tok_s / hf_tok_s})
    del engine
    return {"params": params, "dtype": "bfloat16", "new_tokens": new_tokens, "prompt_tokens": len(prompt_ids),
            "repeats": repeats, "rows": rows_out, "ok": True}


def check_sr_vs_bon(device, size, tokenizer, workdir) -> dict:
    engine = random_engine(size["speed_shape"], tokenizer, device, torch.bfloat16)
    sampling, budget = SamplingParams(max_new_tokens=size["paper_tokens"]), size["paper_budget"]
    runs = {}
    for label, method, params in (
            (f"Bo{size['paper_n']} (one shard)", BEST_OF_N, {"n": size["paper_n"], "batch_size": size["paper_n"]}),
            (f"SR alpha=0.5, b_init <= {size['paper_b_init']}", SPECULATIVE_REJECTION,
             {"alpha": 0.5, "max_init_batch": size["paper_b_init"]})):
        run_one(engine, LogProbReward(), PROMPT, method=method, sampling=SamplingParams(max_new_tokens=2),
                memory_budget=budget, **params)  # warm-up: kernels for these shapes
        result = run_one(engine, LogProbReward(), PROMPT, method=method, sampling=sampling, memory_budget=budget,
                         **params)
        runs[label] = {"wall_s": result.timing["total_s"], "generated_tokens": result.tokens["generated"],
                       "init_batch": result.params.get("init_batch_size", result.params.get("batch_size")),
                       "rounds": len(result.rounds), "best_score": max(
                           (c.final_score for c in result.candidates if c.final_score is not None), default=None)}
    bon, sr = runs.values()
    return {"max_new_tokens": size["paper_tokens"], "budget_bytes": budget, "runs": runs,
            "sr_over_bon_wall": sr["wall_s"] / bon["wall_s"], "ok": True}


def compile_unavailable(device: torch.device) -> str | None:
    """Why nothing can be compiled here, in one line, or None (a CPU compiles with inductor's C++)."""
    if device.type != "cuda":
        return None
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return f"torch {torch.__version__} has no Triton probe"
    if not has_triton():
        return "Triton is not installed (torch.compile's inductor needs it on CUDA)"
    return None


def check_compiled_step(device, size, tokenizer, workdir, repeats: int) -> dict:
    """The engine's eager step against its own compiled one (`--compile on`, engine/compiled.py: what
    `--compile auto` should pick on this device) at batch 64, and on CUDA HF's static cache compiled by
    transformers itself (CUDA graphs) against the same with `disable_compile`."""
    engine = random_engine(size["speed_shape"], tokenizer, device, torch.bfloat16)
    model, prompt_ids, new_tokens, rows = engine.model, engine.encode_prompt(PROMPT), size["new_tokens"], 64
    compiled_engine = Engine(model, tokenizer, compile="on")
    first = time_engine(compiled_engine, prompt_ids, rows, new_tokens)  # compiles the step's graphs (one per row range) and the sampler's
    compiled = min(time_engine(compiled_engine, prompt_ids, rows, new_tokens) for _ in range(repeats))
    eager = min(time_engine(engine, prompt_ids, rows, new_tokens) for _ in range(repeats))
    result = {"batch": rows, "new_tokens": new_tokens, "engine_eager_tok_s": rows * new_tokens / eager,
              "engine_compiled_tok_s": rows * new_tokens / compiled, "engine_compile_s": first - compiled, "ok": True}
    if device.type != "cuda":
        return {**result, "hf_static": "CUDA graphs need a CUDA device (this run: cpu)"}
    static = {"cache_implementation": "static"}
    # on CUDA, generate compiles the decode forward of a static cache by itself (its CompileConfig:
    # fullgraph, mode "reduce-overhead", i.e. CUDA graphs); disable_compile gives the eager baseline
    hf_eager = min(time_hf(model, prompt_ids, rows, new_tokens, disable_compile=True, **static) for _ in range(repeats))
    hf_first = time_hf(model, prompt_ids, rows, new_tokens, **static)  # compiles, captures the graphs (same shapes)
    hf_compiled = min(time_hf(model, prompt_ids, rows, new_tokens, **static) for _ in range(repeats))
    return {**result, "hf_compile_s": hf_first - hf_compiled,  # first call's time over a compiled one
            "hf_static_eager_tok_s": rows * new_tokens / hf_eager, "hf_static_compiled_tok_s": rows * new_tokens / hf_compiled}


def markdown(report: dict) -> str:
    """The report's short Markdown: one line per measurement."""
    lines = [f"# GPU check ({report['date']})", "", f"`{report['command']}`", "",
             (f"{report['device_name']}; torch {report['torch']}; size {report['size']}; "
              f"{report['total_s']:.0f} s in all"), ""]
    for name, section in report["sections"].items():
        status = section["status"]
        head = f"## {name}: {status}" + (f" ({section['seconds']:.1f} s)" if "seconds" in section else "")
        lines += [head, ""]
        if status == "skipped":
            lines += [section["reason"], ""]
            continue
        if "error" in section:  # raised; a section whose checks did not hold shows its measurements below
            lines += [f"`{section['error']}`", ""]
            continue
        if name == "fast_paths":
            lines += [f"- {m}: max |logit error| {r['max_abs_logit_error']:.4f} (tolerance {r['tolerance']}), "
                      f"forward {r['forward_kind']}" for m, r in section["models"].items()]
        elif name == "memory":
            lines += [f"- {m}: measured peak {r['measured_peak_bytes'] / 2**20:.1f} MiB <= bound "
                      f"{r['bound_bytes'] / 2**20:.1f} MiB (budget {section['budget_bytes'] / 2**20:.0f} MiB + margin): "
                      f"{r['ok']}; {r['candidates']} responses, {r['rounds']} rounds" for m, r in section["runs"].items()]
        elif name == "engine_vs_hf":
            lines += [f"- batch {r['batch']}: engine {r['engine_tok_s']:.0f} tok/s, HF generate {r['hf_tok_s']:.0f} "
                      f"tok/s, {r['ratio']:.2f}x ({section['params'] / 1e9:.2f}B params)" for r in section["rows"]]
        elif name == "sr_vs_bon":
            lines += [f"- {m}: {r['wall_s']:.2f} s, {r['generated_tokens']} tokens, initial batch {r['init_batch']}"
                      for m, r in section["runs"].items()]
            lines += [f"- SR / BoN wall time: {section['sr_over_bon_wall']:.2f}"]
        elif name == "compiled_step":
            lines += [(f"- batch {section['batch']}: engine eager {section['engine_eager_tok_s']:.0f} tok/s, compiled "
                       f"{section['engine_compiled_tok_s']:.0f} (compile {section['engine_compile_s']:.1f} s)")]
            lines += [f"- HF static cache: {section['hf_static']}" if "hf_static" in section else
                      (f"- HF static cache: eager {section['hf_static_eager_tok_s']:.0f} tok/s, compiled (CUDA graphs) "
                       f"{section['hf_static_compiled_tok_s']:.0f} (compile {section['hf_compile_s']:.1f} s)")]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (the default), cuda:N or cpu")
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument("--tiny", action="store_true", help="= --device cpu --size tiny (the test suite's run)")
    parser.add_argument("--out", default="results/gpu-check", help="folder of report.json and report.md")
    parser.add_argument("--repeats", type=int, default=2, help="each time is the best of this many rounds")
    parser.add_argument("--deadline-s", type=float, default=450,
                        help="sections not started by then are skipped (the machine is lent for 8 minutes)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.device, args.size = "cpu", "tiny"
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (use --tiny to run on the CPU)")
    size, started = SIZES[args.size], time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    given = sys.argv[1:] if argv is None else argv
    report = {"command": " ".join(["python", "benchmarks/gpu_check.py", *given]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
              "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
              else platform.processor() or platform.machine(), "size": args.size, "sections": {}}
    tokenizer = build_tokenizer()
    sections = {
        "fast_paths": lambda w: check_fast_paths(device, size, tokenizer, w),
        "memory": lambda w: check_memory(device, size, tokenizer, w),
        "engine_vs_hf": lambda w: check_engine_vs_hf(device, size, tokenizer, w, args.repeats),
        "sr_vs_bon": lambda w: check_sr_vs_bon(device, size, tokenizer, w),
        "compiled_step": lambda w: check_compiled_step(device, size, tokenizer, w, args.repeats),
    }
    with tempfile.TemporaryDirectory(prefix="specrej-gpu-check-") as workdir:
        for name, run in sections.items():
            reason = compile_unavailable(device) if name == "compiled_step" else None
            if time.perf_counter() - started > args.deadline_s:
                reason = f"not started: {args.deadline_s:.0f} s deadline passed"
            if reason:
                report["sections"][name] = {"status": "skipped", "reason": reason}
                print(f"{name}: skipped ({reason})", flush=True)
                continue
            tic = time.perf_counter()
            try:
                record = run(Path(workdir))
                status = "ok" if record.pop("ok") else "failed"
                record = {"status": status, **record}
            except Exception as error:  # one section's failure is reported; the others still run
                traceback.print_exc()
                record = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
            record["seconds"] = time.perf_counter() - tic
            report["sections"][name] = record
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(f"{name}: {record['status']} ({record['seconds']:.1f} s)", flush=True)
    report["total_s"] = time.perf_counter() - started
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(report))
    print(markdown(report))
    failed = [name for name, section in report["sections"].items() if section["status"] == "failed"]
    if failed:
        print(f"gpu_check: failed: {', '.join(failed)} (see {out / 'report.md'})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
