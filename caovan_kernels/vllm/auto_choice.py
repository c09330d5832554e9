"""Where caovan_mode=auto runs GDNCore: only on a platform where its prefill measured faster than vLLM's own GDN
kernels at every measured shape.

Prefill decides: one layer class runs both prefill and decode, and on a long prompt the prefill outweighs what the
decode steps gain or lose. A platform without a measurement keeps vLLM's kernels: auto must never make a user
slower, and an unmeasured guess could. caovan_mode=force runs GDNCore anywhere; caovan_require_turbo3 demands it
(see layer._decide). The measurements are data (EVIDENCE); the engine's log line and the daemon's /status render
their reason from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from caovan_kernels.tensorcore75 import retargets_fp16_dots
from caovan_kernels.tensorcore75.seam import version_tuple

# Qwen3.6-27B's GDN layer at TP2, fp16, initial states in and final states out, vLLM 0.21 and Triton 3.6.
PREFILL_SHAPES = "1x8192 / 1x32768 / 4x8192 tokens"
WHERE = "docs/gdncore.md#where-caovan_modeauto-runs-gdncore"


@dataclass(frozen=True)
class AutoEvidence:
    """GDNCore's prefill against vLLM's kernels on one platform class: the compile target, how its dots run, vLLM's
    time over GDNCore's per call at PREFILL_SHAPES, how and when that was measured, and where the figures are."""

    arch: int  # compute capability compiled for (75: sm_75)
    path: str  # how the dots run there, as the reason names it ("" where there is one way)
    turing_mma: bool | None  # whether TensorCore75 retargets fp16 dots (None: either)
    min_triton: tuple[int, int] | None  # the Triton release from which the row holds (None: any)
    prefill_speedup: tuple[float, float, float]
    setup: str
    measured: str  # date of the measurement
    documented: str

    @property
    def platform(self) -> str:
        return f"sm_{self.arch} {self.path}".rstrip()

    @property
    def gdncore(self) -> bool:
        """auto runs GDNCore here: faster at every measured shape."""
        return min(self.prefill_speedup) > 1.0

    def applies(self, arch: int, turing_mma: bool, triton: tuple[int, int] | None) -> bool:
        if arch != self.arch or self.turing_mma not in (None, turing_mma):
            return False
        return self.min_triton is None or (triton is not None and triton >= self.min_triton)

    def summary(self) -> str:
        speedups = " / ".join(f"{s:.2f}x" for s in self.prefill_speedup)
        return f"prefill at {PREFILL_SHAPES}: {speedups} the speed of vLLM's kernels, {self.setup}; {self.documented}"


# On sm_75 the Turing proxy (sm_75 code on an H200) stands in for a 2080 Ti; held to a 2080 Ti's SM count (the
# driver grants 72 of the H200's 132), since a 2080 Ti takes GDNCore's kernel 2 in more waves than the whole H200.
# Triton before 3.4 lowers sm_75 dots to mma itself: the sm_75 rows hold from 3.4 on.
EVIDENCE = (
    AutoEvidence(75, "with Triton's FMA dots", False, (3, 4), (0.96, 0.98, 1.05),
                 "Turing proxy, GPU time per call, vLLM's kernels from a separate run", "2026-12-02", WHERE),
    AutoEvidence(75, "with TensorCore75", True, (3, 4), (1.40, 1.48, 1.51),
                 "Turing proxy on a 2080 Ti's SM count, whole call under CUDA graphs, side by side", "2026-12-03",
                 WHERE),
    AutoEvidence(90, "", None, None, (1.07, 1.18, 1.19),
                 "H200, whole call under CUDA graphs, side by side", "2026-12-03", WHERE),
)


def auto_choice(arch: int, turing_mma: bool, triton: tuple[int, int] | None) -> tuple[bool, str]:
    """(run GDNCore, why) for a compile target (75 for sm_75), whether TensorCore75 retargets this process's fp16
    dots, and the Triton release (major, minor)."""
    row = next((row for row in EVIDENCE if row.applies(arch, turing_mma, triton)), None)
    if row is None:
        return False, f"stock vLLM GDN kernels on sm_{arch}: GDNCore has no measurement there (docs/gdncore.md)"
    if row.gdncore:
        return True, f"GDNCore kernels on {row.platform}, where they measured faster ({row.summary()})"
    return False, (f"stock vLLM GDN kernels on {row.platform}, where GDNCore did not measure faster throughout "
                   f"({row.summary()})")


def on_this_process() -> tuple[bool, str]:
    """auto_choice for the CUDA device this process compiles for (TRITON_OVERRIDE_ARCH first, as Triton does)."""
    # Imported here, once a CUDA engine asks: a CPU engine may lack Triton, and importing caovan_kernels.gdn
    # decorates its kernels, which must wait until the layer has settled TRITON_INTERPRET.
    import triton

    from caovan_kernels.gdn._common import compile_arch

    arch = compile_arch("cuda", None)
    return auto_choice(arch, retargets_fp16_dots(), version_tuple(triton.__version__))
