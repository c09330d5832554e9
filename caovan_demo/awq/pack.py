"""Our AWQ packer: round-to-nearest asymmetric int4 per 128-wide input group, packed in the AutoAWQ GEMM layout.

No activation-aware scale search: that search picks which values to store (it needs calibration data); the bit
layout, which is what vLLM's loaders and kernels depend on, is the same either way."""

from __future__ import annotations

import torch

from .format import (
    BITS,
    GROUP_SIZE,
    MAX_Q,
    PACK,
    PACK_ORDER,
    SCALE_DTYPE,
    AwqFormatError,
    QuantizedLinear,
)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[R, C] integers in [0, 15] -> int32 [R, C / 8], nibble i of word j holding column 8j + PACK_ORDER[i]."""
    rows, cols = values.shape
    words = values.to(torch.int64).reshape(rows, cols // PACK, PACK)[:, :, list(PACK_ORDER)]
    shifts = torch.arange(PACK, dtype=torch.int64) * BITS
    packed = (words << shifts).sum(dim=-1)  # < 2**32: exact in int64
    # Reinterpret as the two's-complement int32 the checkpoints hold (words with the top bit set read negative).
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def quantize_linear(weight: torch.Tensor, group_size: int = GROUP_SIZE, where: str = "weight") -> QuantizedLinear:
    """Quantize a linear layer's weight [out_features, in_features] to AWQ int4 with zero points."""
    if weight.dim() != 2:
        raise AwqFormatError(f"{where}: AWQ quantizes 2-D linear weights, this one is {tuple(weight.shape)}")
    n, k = weight.shape
    if k % group_size or n % PACK:
        raise AwqFormatError(
            f"{where}: {n} output x {k} input features; AWQ needs input features in whole groups of {group_size} "
            f"and output features in multiples of {PACK}. Leave this layer unquantized (modules_to_not_convert) "
            "or change its width")
    groups = weight.float().t().reshape(k // group_size, group_size, n)  # [G, group, N]: a group's rows together
    w_min, w_max = groups.amin(dim=1), groups.amax(dim=1)  # [G, N]
    # The scale as stored (float16), so that the integers are chosen for the scale a reader will use.
    scales = ((w_max - w_min).clamp(min=1e-5) / MAX_Q).to(SCALE_DTYPE)
    s = scales.float()
    zeros = (-torch.round(w_min / s)).clamp(0, MAX_Q)
    q = (torch.round(groups / s[:, None, :]) + zeros[:, None, :]).clamp(0, MAX_Q)
    return QuantizedLinear(qweight=pack_int4(q.reshape(k, n)), qzeros=pack_int4(zeros), scales=scales,
                           group_size=group_size)
