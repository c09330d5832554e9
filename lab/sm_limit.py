"""The Turing proxy on a 2080 Ti's number of SMs.

An H200 has 132 SMs, a 2080 Ti 68. A kernel whose programs outnumber what the SMs hold at once runs in waves
(caovan_kernels.tensorcore75.registers.resident_blocks), and on 132 SMs the proxy can run in one wave what a 2080 Ti
runs in two: GDNCore's prefill kernel 2 for one TP2 sequence is such a launch (docs/gdncore.md, "Residency").
`limit(num_sms)` gives a stream of a CUDA green context holding that many SMs (torch.cuda.green_contexts, a beta API;
the driver may round the count up to its SM granularity), after checking with a probe kernel, which records the SM
each of its programs ran on, that eager launches and CUDA-graph replays on that stream stay on at most that many SMs.
Work timed on the stream, graphs captured on it included, then runs on that many SMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

RTX_2080_TI_SMS = 68
# Enough programs that every SM the work may use gets some (16 per SM of a 256-SM GPU), each a few microseconds
# long, so that they spread over the SMs rather than finish on the first few.
_PROBE_PROGRAMS = 4096
_PROBE_SPIN = 4096
# Drivers split SMs off in groups (8 on Hopper): a count granted above the asked one by less than this is the
# driver's rounding, not a limit that failed.
_SM_GRANULARITY = 8


class SmLimitError(Exception):
    """The GPU work cannot be held to the asked number of SMs here; timings on all SMs would misstate Turing."""


@dataclass(frozen=True)
class SmLimit:
    asked: int
    granted: int  # the most SMs the probe saw in use, eager or replayed from a graph
    device_sms: int  # the SMs the probe saw in use on a plain stream: the GPU's own (the proxy's view may say 68)
    stream: torch.cuda.Stream
    context: Any  # the green context: the stream is valid while it lives

    def describe(self) -> str:
        return f"{self.granted} of the GPU's {self.device_sms} SMs (asked {self.asked}; a 2080 Ti has {RTX_2080_TI_SMS})"


@triton.jit
def _sm_probe_kernel(out_ptr, spin):
    pid = tl.program_id(0)
    sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=False, pack=1)
    acc = pid.to(tl.float32)
    for _ in range(spin):
        acc = acc * 0.999 + 1.0
    # acc is never negative: the store always happens, and the loop cannot be dropped as dead code
    tl.store(out_ptr + pid, tl.where(acc >= 0, sm, -1))


def sms_used(stream: torch.cuda.Stream, graph: bool) -> int:
    """How many distinct SMs the probe's programs ran on when launched on `stream` (from a CUDA graph captured on it
    when `graph`)."""
    out = torch.full((_PROBE_PROGRAMS,), -1, dtype=torch.int32, device=stream.device)

    def launch() -> None:
        _sm_probe_kernel[(_PROBE_PROGRAMS,)](out, _PROBE_SPIN)

    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch()  # compiles outside any capture
        if graph:
            out.fill_(-1)
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured, stream=stream):
                launch()
            captured.replay()
    stream.synchronize()
    if int(out.min()) < 0:
        raise SmLimitError("the SM probe left programs unwritten; its launch did not run as asked")
    return int(torch.unique(out).numel())


def limit(num_sms: int = RTX_2080_TI_SMS, device: int = 0) -> SmLimit:
    """A stream whose work runs on `num_sms` SMs of `device` (more if the driver rounds up), checked by the probe.
    The GPU's own SM count comes from the probe too: on the Turing proxy torch's device properties may be the 2080
    Ti view's (caovan_kernels/turing/device_view.py)."""
    if not torch.cuda.is_available():
        raise SmLimitError("no CUDA GPU here: an SM limit is for timing the Turing proxy on an NVIDIA GPU")
    with torch.cuda.device(device):
        return _limit(num_sms, device)


def _limit(num_sms: int, device: int) -> SmLimit:
    try:
        device_sms = sms_used(torch.cuda.Stream(device), graph=False)
    except RuntimeError as exc:  # torch's CUDA errors
        raise SmLimitError(f"the SM probe failed on a plain stream ({type(exc).__name__}: {exc})") from exc
    if not 0 < num_sms < device_sms:
        raise SmLimitError(f"asked for {num_sms} SMs on a GPU whose work runs on {device_sms}; ask for 1 to "
                           f"{device_sms - 1}, or run without the limit")
    try:
        from torch.cuda.green_contexts import GreenContext

        context = GreenContext.create(num_sms=num_sms, device_id=device)
        stream = context.Stream()
    except (ImportError, AttributeError, RuntimeError, TypeError) as exc:
        raise SmLimitError(
            f"torch {torch.__version__} could not give a stream on {num_sms} SMs through a CUDA green context "
            f"({type(exc).__name__}: {exc}); torch's green contexts need torch and a driver for CUDA 12.8+, a "
            f"GreenContext with Stream(), and an SM count the driver can split off. Run without the SM limit, and "
            f"read its ratios against docs/gdncore.md's residency projection") from exc
    try:
        used = max(sms_used(stream, graph=False), sms_used(stream, graph=True))
    except RuntimeError as exc:  # torch's CUDA errors, a capture refused on the green context's stream
        raise SmLimitError(f"the SM probe failed on a green context's stream ({type(exc).__name__}: {exc}); run "
                           f"without the SM limit") from exc
    if used > _round_up(num_sms, _SM_GRANULARITY) or used >= device_sms:
        raise SmLimitError(f"work on the green context's stream ran on {used} SMs (asked {num_sms}, a plain "
                           f"stream {device_sms}): the SM limit does not hold as asked here, so its timings would not "
                           f"show a 2080 Ti's waves. Run without it")
    return SmLimit(num_sms, used, device_sms, stream, context)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
