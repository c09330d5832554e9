"""Small helpers shared by the GDN kernels: block sizes, dot precision, input checks."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

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


def dot_precision(device_type: str, device_index: int | None) -> str:
    """tf32 where tensor cores take fp32 operands (sm_80+); plain fp32 otherwise (sm_75 and the interpreter)."""
    arch = compile_arch(device_type, device_index)
    return "tf32" if arch is not None and arch >= 80 else "ieee"


def precision_for(t: torch.Tensor) -> str:
    return dot_precision(t.device.type, t.device.index)


# Forms of the chunked prefill (block sizes and operand types; chunk.prefill_blocks):
FMA = "fma"  # Triton's FMA dots (sm_75 without TensorCore75, the interpreter): small blocks, the inverse in fp32
TURING_MMA = "turing_mma"  # sm_75 with TensorCore75: fp16 operands, blocks that keep m16n8k8 free of spills
TENSOR_CORES = "tensor_cores"  # sm_80+: operands in the input dtype (tf32 for fp32)
FORMS = (FMA, TURING_MMA, TENSOR_CORES)


@dataclass(frozen=True)
class DotPlan:
    """How the chunked prefill's products run: tl.dot's input_precision, whether operands take the input dtype
    (fp32 accumulation, what tensor cores take) and the form (above)."""

    precision: str
    native: bool
    form: str

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"unknown GDN prefill form {self.form!r}; one of {', '.join(FORMS)}")
        if self.form != FMA and not self.native:
            raise ValueError(f"the {self.form} form takes its operands in the input dtype (native=True)")


def plan_for_target(arch: int | None, dtype: torch.dtype, dim_k: int, dim_v: int, turing_mma: bool) -> DotPlan:
    """The plan for a compile target (None: the CPU interpreter), input dtype and head dims; turing_mma: whether
    TensorCore75 retargets this process's fp16 dots.

    sm_75 takes the Turing MMA form for fp16 at power-of-two head dims only: those are the configurations
    sm75_fit finds free of spills (a masked head dim such as 100 spills in both kernels, so it keeps the FMA form,
    as do bf16 and fp32, which Turing's tensor cores do not take). The interpreter emulates fp16 operands with fp32
    accumulation exactly (numpy matmul in the accumulator's dtype) but not bf16, so there only fp16 runs native.
    """
    fp16 = dtype == torch.float16
    if arch is None:
        return DotPlan("ieee", native=fp16, form=FMA)
    if arch >= 80:
        return DotPlan("tf32", native=True, form=TENSOR_CORES)
    pow2 = head_block(dim_k) == dim_k and head_block(dim_v) == dim_v
    from caovan_kernels.tensorcore75 import TURING

    form = TURING_MMA if arch == TURING and fp16 and turing_mma and pow2 else FMA
    return DotPlan("ieee", native=True, form=form)


def dot_plan(t: torch.Tensor, dim_k: int, dim_v: int) -> DotPlan:
    """The plan for inputs like t on its device and Triton's compile target (Triton >= 3.4 lowers sm_75 dots to FMA
    unless TensorCore75 retargets them)."""
    from caovan_kernels.tensorcore75 import retargets_fp16_dots

    return plan_for_target(compile_arch(t.device.type, t.device.index), t.dtype, dim_k, dim_v, retargets_fp16_dots())


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
