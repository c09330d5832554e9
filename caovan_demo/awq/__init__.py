"""AWQ int4 in the AutoAWQ GEMM checkpoint format: our packer (pack.py), a plain dequantization reference written
from the format definition (reference.py), and the checkpoint-level conversion (checkpoint.py)."""

from .checkpoint import dequantize_tensors, quantization_config, quantize_tensors
from .format import AwqFormatError, QuantizedLinear
from .pack import quantize_linear
from .reference import dequantize

__all__ = ["AwqFormatError", "QuantizedLinear", "dequantize", "dequantize_tensors", "quantization_config",
           "quantize_linear", "quantize_tensors"]
