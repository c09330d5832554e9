"""Where caovan_mode=auto runs GDNCore: only on a platform where it measured faster than vLLM's own GDN kernels.

One row per platform class with the measurement behind it (docs/gdncore.md keeps the same table with dates). A
platform class without a measurement keeps vLLM's kernels: auto must never make a user slower, and an unmeasured
guess could. caovan_mode=force runs GDNCore anywhere; caovan_require_turbo3 demands it (see layer._decide).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    platform: str
    gdncore: bool  # auto runs GDNCore here
    evidence: str


# Measured 2026-12-01 on one H200 (native sm_90, and the Turing proxy for sm_75), vLLM 0.21, Triton 3.6, fp16,
# Qwen3.6-27B's GDN layer at TP2, GPU time per call. GDNCore's Turing MMA prefill form (fp16 operands under
# TensorCore75) is newer than these figures: until it is measured, sm_75 with TensorCore75 keeps vLLM's kernels.
SM75_FMA = Measured(
    "sm_75 with Triton's FMA dots", True,
    "prefill 1x8192: GDNCore 4.79 ms, fla-core 16.3 ms, vLLM's kernels did not finish autotuning in 280 s; "
    "decode B=2 T=4: 17.8 us vs vLLM's 51.9 us")
SM75_TURING_MMA = Measured(
    "sm_75 with TensorCore75", False,
    "prefill 1x8192: vLLM's kernels 1.14 ms on m16n8k8, GDNCore 4.79 ms (its FMA form; the Turing MMA form is "
    "not measured yet)")
SM90 = Measured(
    "sm_90", False,
    "prefill 1x8192: vLLM's kernels 0.47 ms, GDNCore 0.77 ms; decode B=64 T=4: 157 us vs GDNCore's 187 us")


def _platform(arch: int, turing_mma: bool, triton: tuple[int, int] | None) -> Measured | None:
    if arch == 75 and triton is not None and triton >= (3, 4):  # older Triton lowers sm_75 dots to mma itself
        return SM75_TURING_MMA if turing_mma else SM75_FMA
    if arch == 90:
        return SM90
    return None


def auto_choice(arch: int, turing_mma: bool, triton: tuple[int, int] | None) -> tuple[bool, str]:
    """(run GDNCore, why) for a compile target (75 for sm_75), whether TensorCore75 retargets this process's fp16
    dots, and the Triton release (major, minor)."""
    measured = _platform(arch, turing_mma, triton)
    if measured is None:
        return False, f"stock vLLM GDN kernels on sm_{arch}: GDNCore has no measurement there (docs/gdncore.md)"
    if measured.gdncore:
        return True, f"GDNCore kernels on {measured.platform}, where they measured faster ({measured.evidence})"
    return False, f"stock vLLM GDN kernels on {measured.platform}, where they measured faster ({measured.evidence})"


def on_this_process() -> tuple[bool, str]:
    """auto_choice for the CUDA device this process compiles for (TRITON_OVERRIDE_ARCH first, as Triton does)."""
    import triton

    from caovan_kernels.gdn._common import compile_arch
    from caovan_kernels.tensorcore75 import retargets_fp16_dots
    from caovan_kernels.tensorcore75.seam import version_tuple

    arch = compile_arch("cuda", None)
    return auto_choice(arch, retargets_fp16_dots(), version_tuple(triton.__version__))
