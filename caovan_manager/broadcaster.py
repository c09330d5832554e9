"""Fan-out of daemon events (state changes, samples, log lines) to any number of async subscribers (SSE streams)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Broadcaster(Generic[T]):
    """Each subscriber gets its own bounded queue; a subscriber too slow to keep up loses its oldest items, never
    slows the publisher down."""

    def __init__(self, queue_size: int = 1000, record: Callable[[T], None] | None = None) -> None:
        """record: also told of every item (the recent past that new subscribers are sent first)."""
        self._queues: set[asyncio.Queue[T]] = set()
        self._queue_size = queue_size
        self._record = record

    def publish(self, item: T) -> None:
        if self._record is not None:
            self._record(item)
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(item)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[T]]:
        queue: asyncio.Queue[T] = asyncio.Queue(self._queue_size)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    @property
    def subscribers(self) -> int:
        return len(self._queues)
