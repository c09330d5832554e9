"""Where caovan_mode=auto runs GDNCore: only on a platform where it measured faster than vLLM's own GDN kernels
(in prefill at every measured shape; see below why prefill decides).

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


# Measured on one H200 (native sm_90, and the Turing proxy for sm_75), vLLM 0.21, Triton 3.6, fp16, Qwen3.6-27B's
# GDN layer at TP2, GPU time per call (benchmarks/turing_bench.py, or the sum of the kernels' GPU times in
# benchmarks/gdn_breakdown.py; docs/benchmarks.md). Prefill is 1x8192 / 1x32768 / 4x8192 tokens. Prefill decides: one layer class runs both prefill and decode, and on a long prompt the prefill
# outweighs what the decode steps gain or lose. On sm_75 the proxy decides on a 2080 Ti's SM count (--sms 68: the
# driver grants 72 of the H200's 132), since a 2080 Ti takes GDNCore's kernel 2 in more waves than the whole H200.
SM75_FMA = Measured(
    "sm_75 with Triton's FMA dots", False,
    "on the Turing proxy, sm_75 code on an H200: prefill, vLLM's kernels 4.27 / 17.2 / 15.0 ms (2026-12-01), "
    "GDNCore 4.42 / 17.6 / 14.3 ms, fla-core 16.5 / 63.5 / 60.9 ms (2026-12-02); decode B=2 T=4 eager: GDNCore "
    "17.8 us, vLLM's 51.9 us")
SM75_TURING_MMA = Measured(
    "sm_75 with TensorCore75", True,
    "on the Turing proxy held to a 2080 Ti's SM count (72 of an H200's SMs), 2026-12-03, side by side: prefill on "
    "m16n8k8 with the outputs in a kernel of their own, whole call under CUDA graphs GDNCore 0.85 / 3.26 / 2.83 ms, "
    "vLLM's kernels 1.19 / 4.81 / 4.26 ms (all 132 SMs: GDNCore 0.60 / 2.23 / 1.80 against 0.96 / 3.87 / 2.77); "
    "decode B=64 T=1 / T=4 GDNCore 73 / 180 us, vLLM's 85 / 238 us")
SM90 = Measured(
    "sm_90", True,
    "2026-12-03 (sixth session), side by side: prefill with w and u formed ahead of the walk, whole call under CUDA "
    "graphs GDNCore 0.44 / 1.58 / 1.43 ms, vLLM's kernels 0.47 / 1.87 / 1.69 ms (kernel GPU time 0.43 / 1.56 / 1.41 "
    "against 0.47 / 1.87 / 1.69); decode B=64 T=1 / T=4 GDNCore 56 / 137 us, vLLM's 66 / 159 us")


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
    return False, (f"stock vLLM GDN kernels on {measured.platform}, where GDNCore did not measure faster throughout "
                   f"({measured.evidence})")


def on_this_process() -> tuple[bool, str]:
    """auto_choice for the CUDA device this process compiles for (TRITON_OVERRIDE_ARCH first, as Triton does)."""
    import triton

    from caovan_kernels.gdn._common import compile_arch
    from caovan_kernels.tensorcore75 import retargets_fp16_dots
    from caovan_kernels.tensorcore75.seam import version_tuple

    arch = compile_arch("cuda", None)
    return auto_choice(arch, retargets_fp16_dots(), version_tuple(triton.__version__))
