"""Proof that GDNCore runs inside the engine: the two activity markers and call counters in the log.

On CPU every GDNCore call runs Python, so calls are counted on the host. On CUDA, vLLM replays decode steps from
CUDA graphs, where no Python runs: decode steps are counted on the GPU instead (an add captured into the graph),
and a watcher thread started at the first real prefill reads that counter and prints the DISPATCH marker once a
real decode step went through our kernels. The counter is zeroed at that first real prefill, so the warm-up,
profiling and capture runs vLLM makes before serving (some of them shaped like prefills) do not count.

Each read is a small copy on the GPU, so the watcher reads often only while the count moves: every read that finds
no new step doubles its wait (up to a minute: an idle engine sees one 8-byte copy a minute), and each real prefill
(seen on the host) brings the wait back to the shortest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from caovan_kernels.contract import (
    DISPATCH,
    REAL_PREFILL,
    device_steps_line,
    kernel_calls_line,
)
from caovan_kernels.logger import log

from .markers import emit_once

WATCH_SHORTEST_S = 0.5
WATCH_LONGEST_S = 60.0

_calls = {"prefill": 0, "decode": 0}
_device_steps: torch.Tensor | None = None
_serving = False
_prefill_seen = threading.Event()  # set by each real prefill: the watcher goes back to its shortest wait


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
    _prefill_seen.set()
    if first and _device_steps is not None:
        _device_steps.zero_()  # warm-up and capture runs happened before serving; count real steps only
        threading.Thread(target=watch_device_steps, args=(_reader(_device_steps), _prefill_seen),
                         name="caovan-gdn-watch", daemon=True).start()


def _reader(counter: torch.Tensor) -> Callable[[], int]:
    side: list[torch.cuda.Stream] = []  # made in the watcher's thread, on its first read

    def read() -> int:
        if not side:
            torch.cuda.set_device(counter.device)
            side.append(torch.cuda.Stream(counter.device))  # a side stream never waits for the model's stream
        with torch.cuda.stream(side[0]):
            return int(counter.to("cpu"))

    return read


def watch_device_steps(read: Callable[[], int], prefill_seen: threading.Event,
                       shortest_s: float = WATCH_SHORTEST_S, longest_s: float = WATCH_LONGEST_S,
                       reads: int | None = None) -> None:
    """Read the step counter, print the DISPATCH marker at the first step and a line per power of ten reached.

    Runs for the engine's life (`reads` bounds it for tests); the wait doubles after every read that finds the
    count unchanged and returns to `shortest_s` after a real prefill or a read that finds new steps."""
    wait, logged, last = shortest_s, 0, 0
    while reads is None or reads > 0:
        woke = prefill_seen.wait(wait)
        if woke:  # a real prefill: decode steps follow; read soon, at most once per shortest_s however busy
            prefill_seen.clear()
            time.sleep(shortest_s)
        steps = read()
        reads = None if reads is None else reads - 1
        if steps > 0:
            emit_once(DISPATCH)
        reached = 10 ** (len(str(steps)) - 1) if steps > 0 else 0  # a line per power of ten reached
        if reached > logged:
            logged = reached
            log(device_steps_line(steps))
        wait = shortest_s if woke or steps != last else min(2 * wait, longest_s)
        last = steps
