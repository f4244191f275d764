"""The engine's GEMM on a CPU in bfloat16: weights packed once into oneDNN's blocked layout.

`F.linear` on a CPU in bfloat16 calls oneDNN's matmul, which re-lays out the weight into its blocked
format at every call; at decode shapes (a few dozen rows against a weight of a few MB) that copy is
a large part of the GEMM. Packing each weight once (`torch.ops.mkldnn._reorder_linear_weight`, what
inductor's CPU freezing does) and calling oneDNN's linear on the packed weight
(`torch.ops.mkldnn._linear_pointwise`) runs the same kernel without the copy: the outputs are the
same bits as `F.linear`'s (tests/test_fast_paths.py: prefill and decode at 1-33 rows on Qwen3 and
Gemma 3), faster at the 16 rows of a Best-of-N shard (docs/results.md, "Beside CTranslate2
(and llama.cpp)"); above PACKED_MAX_ROWS rows the weight as it is is faster, and is used.

Elsewhere (float32, where MKL's own packed GEMM is no faster; CUDA; a CPU without native
bfloat16 oneDNN kernels) the weights stay as they are and `F.linear` runs. The packed copies sit
beside the model's own weights, which the Hugging Face modules keep using: on a CPU in bfloat16 the
engine holds its linear weights twice.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


def packs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether linear weights on `device` in `dtype` are packed (`pack`): a CPU in bfloat16 whose
    oneDNN has native bfloat16 kernels."""
    return (device.type == "cpu" and dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise") and torch.ops.mkldnn._is_mkldnn_bf16_supported())


# Above this many rows oneDNN's own per-call layout is faster than the packed weight (the engine
# benchmark's packed and unpacked rows: docs/results.md, "Beside CTranslate2 (and llama.cpp)"), so
# larger GEMMs (SR's initial batches, prefill) take the weight as it is; both give the same bits.
PACKED_MAX_ROWS = 64


class PackedWeight(NamedTuple):
    """A weight as it is (for `F.linear`) and packed into oneDNN's blocked layout."""

    weight: torch.Tensor
    packed: torch.Tensor


def pack(weight: torch.Tensor) -> PackedWeight:
    """`weight` [out, in] with its packed copy, for `packed_linear`."""
    return PackedWeight(weight, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))


def packed_linear(x: torch.Tensor, weight: PackedWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight.weight, bias)`, on the packed weight up to PACKED_MAX_ROWS rows of x."""
    if x.numel() > PACKED_MAX_ROWS * x.shape[-1]:
        return F.linear(x, weight.weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight.packed, bias, "none", [], "")


def linear_for(device: torch.device, dtype: torch.dtype, allow_packing: bool = True):
    """(the GEMM, how a weight is prepared for it): (`packed_linear`, `pack`) where `packs`, else
    (`F.linear`, unchanged)."""
    if allow_packing and packs(device, dtype):
        return packed_linear, pack
    return F.linear, lambda weight: weight
