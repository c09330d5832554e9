"""Admission of proxied requests: through to the engine, wait in a bounded queue, or a clear 503.

Only the supervisor changes the gate (through its effects), and admission checks and counts in one step without an
await in between, so no request slips through to an engine that is being drained or stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Literal

from caovan_manager.errors import Unavailable

from .upstream import Upstream

# idle: the engine is stopped but loads on demand; a request waits as in hold, and asks for the engine first.
Mode = Literal["open", "hold", "idle", "reject"]


class Gate:
    def __init__(self, queue_size: int, queue_wait_s: float, retry_after_s: int,
                 on_demand: Callable[[], None] = lambda: None,
                 on_pending: Callable[[int], None] = lambda pending: None) -> None:
        """on_demand: a request waits at an idle gate (the engine should be loaded); on_pending: the number of
        requests in flight or waiting went to 0 or away from it (for idle timers and swaps)."""
        self.on_demand = on_demand
        self.on_pending = on_pending
        self.queue_size = queue_size
        self.queue_wait_s = queue_wait_s
        self.retry_after_s = retry_after_s
        self.mode: Mode = "hold"
        self.reason = "the engine is starting"
        self.upstream: Upstream | None = None
        self.in_flight = 0
        self.waiting = 0
        self._busy = False
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # The supervisor's side --------------------------------------------------------------------------------------------

    def open(self, upstream: Upstream) -> None:
        self._set("open", "", upstream)

    def hold(self, reason: str = "the engine is restarting") -> None:
        self._set("hold", reason, self.upstream)

    def reject(self, reason: str) -> None:
        self._set("reject", reason, self.upstream)

    def idle(self, reason: str = "the model is not loaded; it is being loaded for this request") -> None:
        self._set("idle", reason, self.upstream)
        if self.waiting:  # requests queued while it drained or stopped: they want it back
            self.on_demand()

    @property
    def pending(self) -> int:
        return self.in_flight + self.waiting

    async def wait_idle(self, timeout_s: float) -> int:
        """Wait until no admitted request is in flight, at most timeout_s; returns how many still are."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        return self.in_flight

    def _set(self, mode: Mode, reason: str, upstream: Upstream | None) -> None:
        self.mode, self.reason, self.upstream = mode, reason, upstream
        # Wake every waiter; each re-checks the new mode.
        self._changed.set()
        self._changed = asyncio.Event()

    # The proxy's side -------------------------------------------------------------------------------------------------

    def deadline(self) -> float:
        """The latest admission of a request arriving now: one deadline for all of its tries at the gate."""
        return asyncio.get_running_loop().time() + self.queue_wait_s

    async def enter(self, deadline: float) -> Upstream:
        """Wait for admission until `deadline` (loop time, from deadline()), or raise Unavailable; returns the
        engine run's clients. Pair with leave()."""
        try:
            upstream = await self._wait_open(deadline)
        except BaseException:  # refused, timed out, or the client left: maybe none is left
            self._note_pending()
            raise
        self.in_flight += 1
        self._idle.clear()
        self._note_pending()
        return upstream

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
        self._note_pending()

    def _note_pending(self) -> None:
        busy = self.pending > 0
        if busy != self._busy:
            self._busy = busy
            self.on_pending(self.pending)

    def _timed_out(self) -> Unavailable:
        return Unavailable(f"{self.reason}; this request waited {self.queue_wait_s:g} s (proxy.queue_wait_s) "
                           f"without the engine becoming ready", self.retry_after_s)

    async def _wait_open(self, deadline: float) -> Upstream:
        if self.mode == "open":
            return self.upstream
        if self.mode == "reject":
            raise Unavailable(self.reason, self.retry_after_s)
        if self.mode == "idle" and self.waiting >= self.queue_size:
            self.on_demand()  # refused for now (the queue is full, or has no room at all), but wanted: load it
        if self.waiting >= self.queue_size:
            raise Unavailable(f"{self.reason}, and the queue of waiting requests is full ({self.queue_size}, "
                              f"proxy.queue_size); retry later", self.retry_after_s)
        loop = asyncio.get_running_loop()
        self.waiting += 1
        self._note_pending()
        if self.mode == "idle":
            self.on_demand()
        try:
            while self.mode in ("hold", "idle"):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise self._timed_out()
                changed = self._changed
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
            if self.mode == "reject":
                raise Unavailable(self.reason, self.retry_after_s)
            return self.upstream
        finally:
            self.waiting -= 1
