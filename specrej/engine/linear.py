"""The engine's GEMM on a CPU in bfloat16: weights packed once into oneDNN's blocked layout.

`F.linear` on a CPU in bfloat16 calls oneDNN's matmul, which re-lays out the weight into its blocked
format at every call; at decode shapes (a few dozen rows against a weight of a few MB) that copy is
a large part of the GEMM. Packing each weight once (`torch.ops.mkldnn._reorder_linear_weight`, what
inductor's CPU freezing does) and calling oneDNN's linear on the packed weight
(`torch.ops.mkldnn._linear_pointwise`) runs the same kernel without the copy: the outputs are the
same bits as `F.linear`'s (checked at every shape a decode or prefill of the engine's models runs,
tests/test_fast_paths.py), at 1.2-1.6x the speed measured at 16-64 rows (docs/results.md).

Elsewhere (float32, where MKL's own packed GEMM measured no faster; CUDA; a CPU without native
bfloat16 oneDNN kernels) the weights stay as they are and `F.linear` runs. The packed copies sit
beside the model's own weights, which the Hugging Face modules keep using: on a CPU in bfloat16 the
engine holds its linear weights twice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def packs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether linear weights on `device` in `dtype` are packed (`pack`): a CPU in bfloat16 whose
    oneDNN has native bfloat16 kernels."""
    return (device.type == "cpu" and dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise") and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] in oneDNN's blocked layout, for `packed_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_linear(x: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` with the weight as `pack` laid it out."""
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, bias, "none", [], "")


def linear_for(device: torch.device, dtype: torch.dtype, allow_packing: bool = True):
    """(the GEMM, how a weight is prepared for it): (`packed_linear`, `pack`) where `packs`, else
    (`F.linear`, unchanged)."""
    if allow_packing and packs(device, dtype):
        return packed_linear, pack
    return F.linear, lambda weight: weight
