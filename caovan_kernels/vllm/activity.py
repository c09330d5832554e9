"""Proof that GDNCore runs inside the engine: the two activity markers and call counters in the log.

On CPU every GDNCore call runs Python, so calls are counted on the host. On CUDA, vLLM replays decode steps from
CUDA graphs, where no Python runs: decode steps are counted on the GPU instead (an add captured into the graph),
and a watcher thread started at the first real prefill reads that counter and prints the DISPATCH marker once a
real decode step went through our kernels. The counter is zeroed at that first real prefill, so the warm-up,
profiling and capture runs vLLM makes before serving (some of them shaped like prefills) do not count.
"""

from __future__ import annotations

import threading
import time

import torch

from caovan_kernels.contract import (
    DISPATCH,
    REAL_PREFILL,
    device_steps_line,
    kernel_calls_line,
)
from caovan_kernels.logger import log

from .markers import emit_once

_WATCH_INTERVAL_S = 0.5

_calls = {"prefill": 0, "decode": 0}
_device_steps: torch.Tensor | None = None
_serving = False


def _is_milestone(count: int) -> bool:
    return count == 10 ** (len(str(count)) - 1)


def record(kind: str) -> None:
    """Count a GDNCore call on the host; print the marker on the first, and the counters at 1, 10, 100, ... calls."""
    _calls[kind] += 1
    emit_once(REAL_PREFILL if kind == "prefill" else DISPATCH)
    if _is_milestone(_calls[kind]):
        log(kernel_calls_line(_calls["prefill"], _calls["decode"] if _device_steps is None else None))


def claim_device_counter(device: torch.device) -> torch.Tensor | None:
    """The GPU decode-step counter for the first GDN layer built in this process (None for the others).

    Allocated here, at model build, because a tensor created during CUDA graph capture would live in the graph's
    memory pool."""
    global _device_steps
    if _device_steps is not None:
        return None
    _device_steps = torch.zeros(1, dtype=torch.int64, device=device)
    return _device_steps


def record_cuda_prefill(state_indices: torch.Tensor) -> None:
    """A prefill batch ran our kernels: count it if it served real requests (real prefills run eagerly: host-side).

    vLLM's own runs before serving use only the null state slot 0; real requests hold slots >= 1. Telling them
    apart reads the slots (one sync), so it is done only until the first real batch and never during a CUDA
    graph capture, which a sync would break."""
    global _serving
    if not _serving:
        if torch.cuda.is_current_stream_capturing() or not bool((state_indices > 0).any()):
            return
        _serving = True
    first = _calls["prefill"] == 0
    record("prefill")
    if first and _device_steps is not None:
        _device_steps.zero_()  # warm-up and capture runs happened before serving; count real steps only
        threading.Thread(target=_watch_device_steps, args=(_device_steps,), name="caovan-gdn-watch",
                         daemon=True).start()


def _watch_device_steps(counter: torch.Tensor) -> None:
    torch.cuda.set_device(counter.device)
    side = torch.cuda.Stream(counter.device)  # reading on a side stream never waits for the model's stream
    logged = 0
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        with torch.cuda.stream(side):
            steps = int(counter.to("cpu"))
        if steps > 0:
            emit_once(DISPATCH)
        reached = 10 ** (len(str(steps)) - 1) if steps > 0 else 0  # a line per power of ten reached
        if reached > logged:
            logged = reached
            log(device_steps_line(steps))
