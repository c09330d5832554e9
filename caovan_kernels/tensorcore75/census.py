"""How many kernels this process compiled for sm_75 with TensorCore75, retargeted or kept and why.

Counted from Triton's compilation listener, which sees freshly built kernels and kernels loaded from the cache alike
(the decision travels in the kernel's metadata). A line is logged at 1, 10, 100, ... kernels, and again with the
names of the retargeted kernels once compiling settles (no new kernel for SETTLE_S): an engine compiles in bursts
(profiling run, graph capture, the first requests), so the last line before it serves holds its real counts, which
the milestones alone left at the last power of ten. `snapshot` gives the counts at any time (the doctor, the tests).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caovan_kernels import contract

from .pipeline import METADATA_KEY, parse_decision

SETTLE_S = 5.0


@dataclass
class Counts:
    retargeted: int = 0
    kept: Counter = field(default_factory=Counter)
    by_kernel: dict[str, str] = field(default_factory=dict)  # kernel name -> last decision ("mma:fp16", ...)
    retargeted_names: set[str] = field(default_factory=set)  # every kernel name retargeted at least once

    @property
    def total(self) -> int:
        return self.retargeted + sum(self.kept.values())


def _is_milestone(count: int) -> bool:
    return count == 10 ** (len(str(count)) - 1)


class Census:
    def __init__(self, log: Callable[[str], None], settle_s: float = SETTLE_S) -> None:
        self._log = log
        self._settle_s = settle_s
        self._lock = threading.Lock()  # Triton may compile on several threads (async compile)
        self._counts = Counts()
        self._summarised_total = 0
        self._settle: threading.Timer | None = None
        self._previous: Any = None
        self._listener: Any = None

    def attach(self) -> None:
        if self._listener is not None:
            return
        from triton import knobs

        previous = knobs.compilation.listener

        def listener(*, src: Any, metadata: dict, metadata_group: dict, times: Any, cache_hit: bool) -> None:
            self.record(metadata)
            if previous is not None:
                previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)

        self._previous, self._listener = previous, listener
        knobs.compilation.listener = listener

    def detach(self) -> None:
        from triton import knobs

        if self._listener is not None and knobs.compilation.listener is self._listener:
            knobs.compilation.listener = self._previous
        self._listener = None

    def record(self, metadata: dict) -> None:
        decision = metadata.get(METADATA_KEY)
        if decision is None:  # not compiled for sm_75 (or by Triton without the hook)
            return
        retargeted, reason = parse_decision(decision)
        with self._lock:
            if retargeted:
                self._counts.retargeted += 1
                self._counts.retargeted_names.add(str(metadata.get("name", "?")))
            else:
                self._counts.kept[reason] += 1
            self._counts.by_kernel[str(metadata.get("name", "?"))] = decision
            line = (contract.tensorcore75_count_line(self._counts.retargeted, dict(self._counts.kept))
                    if _is_milestone(self._counts.total) else None)
            if self._settle is not None:
                self._settle.cancel()
            self._settle = threading.Timer(self._settle_s, self._summarise)
            self._settle.daemon = True  # never holds a process open at exit
            self._settle.start()
        if line:
            self._log(line)

    def _summarise(self) -> None:
        """Compiling settled: the counts so far and which kernels were retargeted, unless nothing changed."""
        with self._lock:
            counts = self._counts
            if counts.total == self._summarised_total:
                return
            self._summarised_total = counts.total
            lines = [contract.tensorcore75_count_line(counts.retargeted, dict(counts.kept)),
                     contract.tensorcore75_retargeted_line(sorted(counts.retargeted_names))]
        for line in lines:
            self._log(line)

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(self._counts.retargeted, Counter(self._counts.kept), dict(self._counts.by_kernel),
                          set(self._counts.retargeted_names))
