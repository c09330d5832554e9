"""A checkpoint's tensors to and from AWQ GEMM: which layers are converted, and the `quantization_config`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from .format import BITS, GROUP_SIZE, AwqFormatError, QuantizedLinear
from .pack import quantize_linear
from .reference import dequantize


def quantization_config(modules_to_not_convert: Sequence[str], group_size: int = GROUP_SIZE) -> dict:
    """config.json's `quantization_config` as AutoAWQ writes it for the GEMM version."""
    return {"quant_method": "awq", "bits": BITS, "group_size": group_size, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": list(modules_to_not_convert)}


def is_converted(module: str, modules_to_not_convert: Sequence[str]) -> bool:
    # vLLM and AutoAWQ skip a layer when any entry is a substring of its name.
    return not any(skip in module for skip in modules_to_not_convert)


def quantize_tensors(tensors: dict[str, torch.Tensor], linear_modules: Iterable[str],
                     modules_to_not_convert: Sequence[str], group_size: int = GROUP_SIZE) -> dict[str, torch.Tensor]:
    """Replace `<module>.weight` of every converted linear module by its qweight / qzeros / scales."""
    out = dict(tensors)
    for module in linear_modules:
        if not is_converted(module, modules_to_not_convert):
            continue
        name = f"{module}.weight"
        if name not in out:
            raise AwqFormatError(f"linear module {module} has no tensor {name} in the checkpoint")
        layer = quantize_linear(out.pop(name), group_size, where=module)
        out.update({f"{module}.qweight": layer.qweight, f"{module}.qzeros": layer.qzeros,
                    f"{module}.scales": layer.scales})
    return out


def dequantize_tensors(tensors: dict[str, torch.Tensor], group_size: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The inverse for reading: every qweight / qzeros / scales triple becomes `<module>.weight` in `dtype`."""
    out = {}
    for name, tensor in tensors.items():
        module, _, suffix = name.rpartition(".")
        if suffix in ("qzeros", "scales"):
            continue
        if suffix != "qweight":
            out[name] = tensor
            continue
        try:
            layer = QuantizedLinear(tensor, tensors[f"{module}.qzeros"], tensors[f"{module}.scales"], group_size)
        except KeyError as missing:
            raise AwqFormatError(f"{module} has a qweight but no {missing.args[0]}; the checkpoint is incomplete") \
                from None
        out[f"{module}.weight"] = dequantize(layer, where=module).to(dtype)
    return out
