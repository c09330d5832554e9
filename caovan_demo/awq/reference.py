"""Plain AWQ GEMM dequantization, written from the format definition alone (beside the packer, as a check on it).

It reads each nibble where the format says it is, with no code shared with pack.py: feature f of each group of 8
output features sits at nibble NIBBLE_OF_FEATURE[f] of its int32 word (AutoAWQ's order 0 2 4 6 1 3 5 7, read the
other way round)."""

from __future__ import annotations

import torch

from .format import QuantizedLinear

NIBBLE_OF_FEATURE = (0, 4, 1, 5, 2, 6, 3, 7)


def unpack_int4(words: torch.Tensor) -> torch.Tensor:
    """int32 [R, C] -> int64 [R, 8C]: column 8j + f is nibble NIBBLE_OF_FEATURE[f] of word j."""
    unsigned = words.to(torch.int64) & 0xFFFFFFFF  # the word's 32 bits, whatever its sign as int32
    out = torch.empty(words.shape[0], words.shape[1] * 8, dtype=torch.int64)
    for feature, nibble in enumerate(NIBBLE_OF_FEATURE):
        out[:, feature::8] = (unsigned >> (4 * nibble)) & 0xF
    return out


def dequantize(layer: QuantizedLinear, where: str = "layer") -> torch.Tensor:
    """The float32 weight [out_features, in_features] that an AWQ GEMM layer stands for: (q - z) * s."""
    layer.check(where)
    q = unpack_int4(layer.qweight)  # [K, N]
    zeros = unpack_int4(layer.qzeros)  # [K / group, N]
    group_of_row = torch.arange(layer.in_features) // layer.group_size
    weight = (q - zeros[group_of_row]).float() * layer.scales.float()[group_of_row]
    return weight.t().contiguous()
