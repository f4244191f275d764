"""Compute repeatability: does a prompt's recorded compute (`timing.compute_s`) stay put when a
CPU-bound neighbour shares the machine, and which clock and thread count make it so?

    python benchmarks/compute_repeatability.py [--threads 1,2] [--repeats 3] [--methods bon,sr,sr-random]
        [--wait-policies default,passive] [--neighbours 1] [--layers 8] [--new-tokens 48]

Each job is its own process (a fresh torch, `specrej.engine.work_clock.set_threads` before the
model is built): one prompt of --methods (bon: Best-of-16; sr and sr-random: α=0.5 from 16 rows,
so they do the same FLOPs) on a random-weight Llama of SmolLM2-135M's width with --layers layers,
the log-prob reward, --new-tokens tokens per row, a fixed seed, so every run does the same work.
A job runs alone, then beside --neighbours CPU-bound processes (`python -c 'while True: pass'`),
alternately, --repeats times, for each thread count and OMP_WAIT_POLICY (default: the OpenMP
runtime's own; passive: waiting threads sleep instead of spinning). Each job prints its clocks
around the run: wall seconds, the process's CPU seconds (`time.process_time`), the main thread's
CPU seconds (`time.thread_time`), and the record's `timing.compute_s` and `total_s`. The table
gives, per setting, each clock's median alone, median beside the neighbour, and their ratio.
Nothing here is a test: it prints what it measured (the test is tests/test_compute_time.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from specrej.methods.bon import BEST_OF_N
from specrej.methods.random_halting import RANDOM_HALTING
from specrej.methods.sr import SPECULATIVE_REJECTION

CLOCKS = ("wall_s", "process_cpu_s", "thread_cpu_s", "compute_s", "total_s", "tokens")  # tokens: the work, the same each run
# the job of each --methods name: Best-of-16, and SR / random-halting SR at one alpha from 16 rows (the same FLOPs)
JOBS = {BEST_OF_N.name: {"n": 16, "batch_size": 16}, SPECULATIVE_REJECTION.name: {"alpha": 0.5, "batch_size": 16},
        RANDOM_HALTING.name: {"alpha": 0.5, "batch_size": 16}}
CORPUS = ["the sea is deep and blue and the wind is cold", "a child asks why the sky is blue",
          "gravity pulls every mass toward every other mass", "write a poem about the moon and the stars"]


def build_engine(layers: int):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from specrej.engine.engine import Engine

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=512, bos_token_id=1,
                         eos_token_id=2, pad_token_id=2)
    torch.manual_seed(0)
    return Engine(LlamaForCausalLM(config).eval(), tokenizer)


def child(args: argparse.Namespace) -> None:
    """One job: the clocks around one prompt's run, as a JSON line on stdout."""
    from specrej.engine.work_clock import set_threads

    threads = set_threads(args.threads)
    from specrej.api import run_one
    from specrej.engine.sampling import SamplingParams
    from specrej.rewards.reward import load_reward

    engine, reward = build_engine(args.layers), load_reward("logprob")
    params = JOBS[args.method]
    sampling = SamplingParams(max_new_tokens=args.new_tokens)
    run_one(engine, reward, CORPUS[1], method=args.method, seed=0, sampling=sampling, **params)  # warm-up
    wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    result = run_one(engine, reward, CORPUS[0], method=args.method, seed=1, sampling=sampling, **params)
    print(json.dumps({"threads": threads, "wall_s": time.perf_counter() - wall,
                      "process_cpu_s": time.process_time() - cpu, "thread_cpu_s": time.thread_time() - thread,
                      "compute_s": result.timing["compute_s"], "total_s": result.timing["total_s"],
                      "tokens": result.tokens["generated"]}))


def run_job(method: str, threads: int, policy: str, neighbours: int, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(neighbours)]
    try:
        job = subprocess.run([sys.executable, __file__, "--child", "--method", method, "--threads", str(threads),
                              "--layers", str(args.layers), "--new-tokens", str(args.new_tokens)],
                             env=env, capture_output=True, text=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    if job.returncode != 0:
        sys.exit(f"a job failed ({method}, {threads} threads):\n{job.stderr}")
    return json.loads(job.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--methods", default=BEST_OF_N.name, help=f"comma-separated, of {', '.join(JOBS)}")
    parser.add_argument("--wait-policies", default="default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--neighbours", type=int, default=1)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", choices=JOBS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.threads = int(args.threads)
        return child(args)
    unknown = set(args.methods.split(",")) - set(JOBS)
    if unknown:
        parser.error(f"--methods: unknown {', '.join(sorted(unknown))} (known: {', '.join(JOBS)})")
    print(f"# {' '.join(sys.argv)}  (cpus: {os.cpu_count()})")
    print("method     threads policy   clock          alone (median, range)     beside (median, range)   ratio")
    for method in args.methods.split(","):
        for threads in map(int, args.threads.split(",")):
            for policy in args.wait_policies.split(","):
                runs = {"alone": [], "beside": []}
                for _ in range(args.repeats):  # alternate, so a slow spell of the machine hits both
                    runs["alone"].append(run_job(method, threads, policy, 0, args))
                    runs["beside"].append(run_job(method, threads, policy, args.neighbours, args))
                for clock in CLOCKS:
                    alone, beside = ([r[clock] for r in runs[k]] for k in ("alone", "beside"))
                    ratio = statistics.median(beside) / statistics.median(alone)
                    print(f"{method:10} {threads:7} {policy:8} {clock:14} {statistics.median(alone):7.3f} "
                          f"({min(alone):.3f}-{max(alone):.3f})   {statistics.median(beside):7.3f} "
                          f"({min(beside):.3f}-{max(beside):.3f})   {ratio:5.2f}", flush=True)


if __name__ == "__main__":
    main()
