"""Small helpers shared by the GDN kernels: block sizes, the compile target, input checks."""

from __future__ import annotations

import functools
import os

import torch
import triton

CHUNK = 64  # tokens per chunk in the prefill (WY) form; 4 sub-blocks of 16
SUB = 16  # sub-block edge: the smallest tile tl.dot accepts
MAX_HEAD_DIM = 256

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def head_block(dim: int) -> int:
    """Power-of-two tile covering a head dim (masked above dim); at least one dot tile."""
    if not 1 <= dim <= MAX_HEAD_DIM:
        raise ValueError(f"GDN head dim {dim} is outside 1..{MAX_HEAD_DIM}; these kernels keep a whole key row per program")
    return max(SUB, triton.next_power_of_2(dim))


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=None)
def compile_arch(device_type: str, device_index: int | None) -> int | None:
    """The compute capability Triton compiles for (75 for sm_75), None in the CPU interpreter.

    TRITON_OVERRIDE_ARCH wins, as it does in Triton: on the Turing proxy the kernels take their sm_75 form, as on a
    2080 Ti. Tensors on the CPU outside the interpreter come from compile-only runs (turing/compile_only.py), whose
    Triton driver names the target."""
    if interpreting():
        return None
    override = os.environ.get("TRITON_OVERRIDE_ARCH", "")
    if override.startswith("sm"):
        return int(override[2:])
    if device_type == "cuda":
        major, minor = torch.cuda.get_device_capability(device_index)
        return major * 10 + minor
    try:
        target = triton.runtime.driver.active.get_current_target()
    except RuntimeError:  # no GPU and no compile-only driver
        return None
    return int(target.arch) if target.backend == "cuda" else None


def check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """Validate [.., T, H, K] / [.., T, HV, V] inputs; returns (H, HV, K, V)."""
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one of fp16/bf16/fp32, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape != k.shape:
        raise ValueError(f"q and k shapes differ: {tuple(q.shape)} vs {tuple(k.shape)}")
    H, K = q.shape[-2], q.shape[-1]
    HV, V = v.shape[-2], v.shape[-1]
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of key heads ({H})")
    head_block(K)
    head_block(V)
    return H, HV, K, V


def token_major(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x as [.., T, heads, dim] with a dense (heads, dim) block and one uniform token stride; returns (x, stride).

    vLLM hands q/k/v over as strided views of its projection output: those pass without a copy.
    """
    stride, shape = x.stride(), x.shape
    dense_rows = stride[-1] == 1 and stride[-2] == shape[-1]
    uniform = len(shape) < 4 or shape[0] == 1 or stride[0] == shape[1] * stride[1]
    if not (dense_rows and uniform):
        x = x.contiguous()
        stride = x.stride()
    return x, stride[-3]
