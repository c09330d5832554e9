"""The AutoAWQ GEMM format, as its checkpoints store one linear layer of weight W [out_features N, in_features K].

- Groups of GROUP_SIZE consecutive input features share, per output feature, a scale s and an integer zero z.
- Each weight is an unsigned 4-bit integer q in [0, 15]; it stands for (q - z) * s.
- `qweight` int32 [K, N / 8]: row k packs the 8 output features 8j .. 8j+7 into word j; the nibble at bits
  4i .. 4i+3 holds feature 8j + PACK_ORDER[i] (AWQ's interleaved order, not the plain 0..7).
- `qzeros` int32 [K / GROUP_SIZE, N / 8]: the zeros, packed the same way.
- `scales` float16 [K / GROUP_SIZE, N].
- A bias, if any, stays `bias` beside them; `weight` itself is gone."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from caovan_demo.errors import AwqFormatError

BITS = 4
PACK = 32 // BITS  # values per int32 word
MAX_Q = (1 << BITS) - 1
GROUP_SIZE = 128
PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds feature PACK_ORDER[i] of its 8
SCALE_DTYPE = torch.float16
TENSOR_SUFFIXES = ("qweight", "qzeros", "scales")


@dataclass(frozen=True)
class QuantizedLinear:
    qweight: torch.Tensor  # int32 [K, N / 8]
    qzeros: torch.Tensor  # int32 [K / group, N / 8]
    scales: torch.Tensor  # float16 [K / group, N]
    group_size: int = GROUP_SIZE

    @property
    def in_features(self) -> int:
        return self.qweight.shape[0]

    @property
    def out_features(self) -> int:
        return self.scales.shape[1]

    def check(self, where: str) -> None:
        """Raise AwqFormatError unless the three tensors have the format's dtypes and agreeing shapes."""
        k, n, g = self.qweight.shape[0], self.scales.shape[1], self.group_size
        if k % g or n % PACK:
            raise AwqFormatError(f"{where}: {k} input / {n} output features do not tile groups of {g} and words of "
                                 f"{PACK}")
        expected = {"qweight": ((k, n // PACK), torch.int32), "qzeros": ((k // g, n // PACK), torch.int32),
                    "scales": ((k // g, n), SCALE_DTYPE)}
        for name, (shape, dtype) in expected.items():
            tensor = getattr(self, name)
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                raise AwqFormatError(f"{where}.{name} is {tensor.dtype} {tuple(tensor.shape)}, but the AWQ GEMM format "
                                     f"with {k} input and {n} output features, group size {g}, needs {dtype} {shape}")
