"""Admission of proxied requests: through to the engine, wait in a bounded queue, or a clear 503.

Only the supervisor changes the gate (through its effects), and admission checks and counts in one step without an
await in between, so no request slips through to an engine that is being drained or stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

Mode = Literal["open", "hold", "reject"]


class Unavailable(Exception):
    """The request cannot be served now; `reason` is for the client, `retry_after_s` for its Retry-After."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class Gate:
    def __init__(self, queue_size: int, queue_wait_s: float, retry_after_s: int) -> None:
        self.queue_size = queue_size
        self.queue_wait_s = queue_wait_s
        self.retry_after_s = retry_after_s
        self.mode: Mode = "hold"
        self.reason = "the engine is starting"
        self.upstream: str | None = None
        self.in_flight = 0
        self.waiting = 0
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # The supervisor's side --------------------------------------------------------------------------------------------

    def open(self, upstream: str) -> None:
        self._set("open", "", upstream)

    def hold(self, reason: str = "the engine is restarting") -> None:
        self._set("hold", reason, self.upstream)

    def reject(self, reason: str) -> None:
        self._set("reject", reason, self.upstream)

    async def wait_idle(self, timeout_s: float) -> int:
        """Wait until no admitted request is in flight, at most timeout_s; returns how many still are."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        return self.in_flight

    def _set(self, mode: Mode, reason: str, upstream: str | None) -> None:
        self.mode, self.reason, self.upstream = mode, reason, upstream
        # Wake every waiter; each re-checks the new mode.
        self._changed.set()
        self._changed = asyncio.Event()

    # The proxy's side -------------------------------------------------------------------------------------------------

    def deadline(self) -> float:
        """The latest admission of a request arriving now: one deadline for all of its tries at the gate."""
        return asyncio.get_running_loop().time() + self.queue_wait_s

    async def enter(self, deadline: float) -> str:
        """Wait for admission until `deadline` (loop time, from deadline()), or raise Unavailable; returns the
        engine's URL. Pair with leave()."""
        upstream = await self._wait_open(deadline)
        self.in_flight += 1
        self._idle.clear()
        return upstream

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def _timed_out(self) -> Unavailable:
        return Unavailable(f"{self.reason}; this request waited {self.queue_wait_s:g} s (proxy.queue_wait_s) "
                           f"without the engine becoming ready", self.retry_after_s)

    async def _wait_open(self, deadline: float) -> str:
        if self.mode == "open":
            return self.upstream
        if self.mode == "reject":
            raise Unavailable(self.reason, self.retry_after_s)
        if self.waiting >= self.queue_size:
            raise Unavailable(f"{self.reason}, and the queue of waiting requests is full ({self.queue_size}, "
                              f"proxy.queue_size); retry later", self.retry_after_s)
        loop = asyncio.get_running_loop()
        self.waiting += 1
        try:
            while self.mode == "hold":
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
