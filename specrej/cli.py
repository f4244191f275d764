"""`specrej generate | score-prefixes | summary`: argument parsing and nothing else."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .budget import parse_size
from .errors import SpecrejError
from .selection import DEFAULT_MAX_INIT_BATCH


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specrej", description="Fast Best-of-N decoding via Speculative Rejection.")
    parser.add_argument("--version", action="version", version=f"specrej {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    # options every model-running subcommand shares
    runtime = argparse.ArgumentParser(add_help=False)
    runtime.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                         help="auto: bfloat16 on CUDA and for the generator on a CPU with native bf16 "
                              "matmul (AVX512-BF16/AMX), else float32 (reward models stay float32 on CPU)")
    runtime.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    runtime.add_argument("--reward-batch-size", type=int, default=16, help="responses per reward-model forward pass")
    runtime.add_argument("--trust-remote-code", action="store_true", help="allow models with custom code (e.g. ArmoRM)")
    runtime.add_argument("--no-progress", action="store_true", help="no progress bar")

    gen = commands.add_parser(
        "generate", help="Best-of-N or Speculative Rejection over a prompt file, one JSONL record per prompt",
        description="Run Best-of-N (bon) or Speculative Rejection (sr) on every prompt of FILE and append one "
                    "JSON line per prompt to OUT as it finishes. Rerunning with the same OUT skips prompts already "
                    "done. Exit status: 0 when at least one prompt succeeded (a failed prompt gets an error record), "
                    "1 when every prompt failed, 2 for bad input.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, parents=[runtime])
    gen.add_argument("--model", default="default",
                     help="generator: Hugging Face id, local directory, .gguf file, or 'default' (SmolLM2-135M-Instruct)")
    gen.add_argument("--reward", default="logprob",
                     help="'logprob', 'python:module:function', or a reward model id/directory")
    gen.add_argument("--method", choices=["bon", "sr"], required=True)
    gen.add_argument("--n", type=int, help="Best-of-N: number of responses")
    gen.add_argument("--alpha", type=float, help="SR: fraction of responses halted at each decision token, in [0, 1)")
    gen.add_argument("--batch-size", type=int,
                     help="BoN: responses per batch; SR: initial batch b_init (default: from the memory budget)")
    gen.add_argument("--memory-budget", type=_size,
                     help="KV-cache budget, e.g. 2GiB (default: CUDA free memory minus a margin; CPU: 1/4 of free RAM, at most 1GiB)")
    gen.add_argument("--min-tokens", type=int, default=8, help="SR: tokens generated before the first rejection")
    gen.add_argument("--max-init-batch", type=int, default=DEFAULT_MAX_INIT_BATCH,
                     help="SR: cap on the default b_init = min(this, KV capacity // --min-tokens); the official "
                          "code's 1000 (default: %(default)s)")
    gen.add_argument("--rejection", choices=["alpha", "adaptive"], default="alpha",
                     help="SR: 'alpha' halts the lowest alpha fraction each round (the paper, eq. 4-5); 'adaptive' "
                          "halts a row when even an optimistic projection of its final reward falls below a "
                          "pessimistic projection of the best row's (paper §6; specrej/adaptive.py), alpha being its "
                          "fallback when no fit exists")
    gen.add_argument("--delta", type=float, default=0.05,
                     help="adaptive: the chance, per round and under the fitted model, of halting the row that "
                          "would end best (0 = Best-of-N)")
    gen.add_argument("--fit", metavar="PREFIXES.parquet",
                     help="adaptive: a prefix table of this generator/reward pair (`specrej score-prefixes`) to fit "
                          "final on partial reward per decision token; without it each prompt estimates online")
    gen.add_argument("--decision-tokens", type=_ints, default=[],
                     help="SR: extra decision tokens at fixed lengths, e.g. 16,32,64 (for studies)")
    gen.add_argument("--max-new-tokens", type=int, default=256)
    gen.add_argument("--temperature", type=float, default=1.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--prompts", required=True, metavar="FILE", help=".json, .jsonl or .txt prompts")
    gen.add_argument("--out", required=True, metavar="OUT.jsonl",
                     help="appended to; locked (OUT.jsonl.lock) while a run writes it, so a second run on it is "
                          "refused")
    gen.add_argument("--exit-zero", action="store_true",
                     help="exit 0 even when every prompt failed (e.g. a workflow job whose prompts may all fail: "
                          "their error records are its result); by default that exits 1")

    prefixes = commands.add_parser(
        "score-prefixes", help="score the first tau tokens of every response of a run (prefix table, parquet)",
        description="For every complete candidate of every record of RUN.jsonl and every decision token tau, "
                    "score the first tau generated tokens (cut at the generator's token boundaries, decoded with "
                    "its tokenizer) with the reward, and write one row per (prompt, candidate, tau) to OUT: "
                    "prompt_id (as a string), candidate_id, tau, partial_score, final_score, num_tokens, "
                    "finished_before_tau. Candidates halted before completing have no final score and are left out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, parents=[runtime])
    prefixes.add_argument("--trajectories", required=True, metavar="RUN.jsonl",
                          help="a run written by `specrej generate` (normally Best-of-N)")
    prefixes.add_argument("--reward", required=True,
                          help="'logprob', 'python:module:function', or a reward model id/directory")
    prefixes.add_argument("--decision-tokens", type=_ints, required=True, metavar="TAUS",
                          help="prefix lengths in generator tokens, e.g. 8,16,32,64,128,256")
    prefixes.add_argument("--out", required=True, metavar="PREFIX.parquet")
    prefixes.add_argument("--model",
                          help="the generator whose tokenizer decodes the prefixes (only its tokenizer is loaded; "
                               "not needed for logprob); default: the records' params.model")

    summary = commands.add_parser("summary", help="print each prompt's chosen response, score and cost",
                                  description="For each prompt of a JSONL run: its score and cost, the prompt "
                                              "(one line, shortened) and the chosen response (in full unless "
                                              "--max-chars), or its error.")
    summary.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    summary.add_argument("--max-chars", type=int, metavar="N", help="show at most N characters of each response")
    return parser


PROMPT_WIDTH = 70  # the prompt on one 80-column line: the response is what a reader opens the file for


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _shorten(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


def summarize(args: argparse.Namespace) -> None:
    from .io import read_records

    if args.max_chars is not None and args.max_chars < 1:
        raise SpecrejError(f"--max-chars must be >= 1, got {args.max_chars}")
    for path in args.runs:
        records = read_records(path)
        if not records:
            raise SpecrejError(f"no complete records in {path}")
        failed = sum("error" in r for r in records)
        print(f"== {path}: {len(records)} prompts" + (f", {failed} failed" if failed else "") + "\n")
        for r in records:
            prompt = f"  prompt: {_one_line(r['prompt'], PROMPT_WIDTH)}"
            if "error" in r:
                print(f"[{r['prompt_id']}] ERROR {r['error']}\n{prompt}\n")
                continue
            best = r["best"]
            print(f"[{r['prompt_id']}] score {best['score'] if best else float('nan'):.4g} | "
                  f"{r.get('num_candidates', len(r['candidates']))} candidates, {len(r['rounds'])} rounds | "
                  f"{r['tokens']['generated']} tokens in {r['timing']['total_s']:.1f}s "
                  f"(score {r['timing']['score_s']:.1f}s) | peak KV {r['peak_kv_bytes'] / 2**20:.1f} MiB")
            print(prompt)
            if best is None:
                print("  response: none completed\n")
                continue
            text = _shorten(best["text"].strip(), args.max_chars)  # indented, so each record stands apart
            print(f"  response ({best['num_tokens']} tokens):\n    " + text.replace("\n", "\n    ") + "\n")


def generate(args: argparse.Namespace) -> int:
    from .api import load_engine, run_prompts, validate
    from .sampling import SamplingParams
    from .io import output_lock, read_prompts
    from .rewards import load_reward

    validate(args.method, args.n, args.alpha)  # bad settings fail before minutes of model loading
    fits = None
    if args.rejection == "adaptive":
        from .adaptive import check_delta, fit_from_prefix_table

        check_delta(args.delta)
        if args.fit:
            import pandas as pd

            try:
                fits = fit_from_prefix_table(pd.read_parquet(args.fit))
            except (OSError, ValueError, KeyError) as error:
                raise SpecrejError(f"--fit {args.fit}: cannot fit from it ({error})") from error
    sampling = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    prompts = read_prompts(args.prompts)
    if not prompts:
        raise SpecrejError(f"no prompts in {args.prompts}")
    with output_lock(args.out):  # a second run on OUT is refused before it loads any model
        engine = load_engine(args.model, dtype=args.dtype, device=args.device,
                             trust_remote_code=args.trust_remote_code)
        reward = load_reward(args.reward, dtype=args.dtype, device=args.device,
                             trust_remote_code=args.trust_remote_code, batch_size=args.reward_batch_size)
        writer = run_prompts(prompts, args.out, engine=engine, reward=reward, method=args.method,
                             model_name=args.model, reward_name=args.reward, seed=args.seed, sampling=sampling,
                             n=args.n, alpha=args.alpha, batch_size=args.batch_size,
                             memory_budget=args.memory_budget, min_tokens=args.min_tokens,
                             max_init_batch=args.max_init_batch, decision_tokens=args.decision_tokens,
                             rejection=args.rejection, delta=args.delta, fits=fits, progress=not args.no_progress)
    failed = [(item.prompt_id, writer.errors[item.prompt_id]) for item in prompts if item.prompt_id in writer.errors]
    if failed and len(failed) == len(prompts):
        prompt_id, error = failed[0]
        print(f"specrej: {len(failed)} of {len(prompts)} prompts failed: prompt {prompt_id}: {error} "
              f"(error records in {args.out})", file=sys.stderr)
        return 0 if args.exit_zero else 1
    if failed:
        print(f"specrej: {len(failed)} of {len(prompts)} prompts failed (see error records in {args.out})",
              file=sys.stderr)
    return 0


def score_prefixes(args: argparse.Namespace) -> None:
    from .prefixes import score_prefix_file

    score_prefix_file(args.trajectories, args.out, reward=args.reward, decision_tokens=args.decision_tokens,
                      model=args.model, dtype=args.dtype, device=args.device,
                      trust_remote_code=args.trust_remote_code, reward_batch_size=args.reward_batch_size,
                      progress=not args.no_progress)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"generate": generate, "score-prefixes": score_prefixes, "summary": summarize}[args.command](args) or 0
    except SpecrejError as error:
        print(f"specrej: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `specrej summary RUN.jsonl | head`: the reader left early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout again at exit
        return 1


if __name__ == "__main__":
    sys.exit(main())
