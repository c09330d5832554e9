"""Server-sent events from a Broadcaster: one `data:` JSON line per item, a comment every 15 s to keep proxies open."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from fastapi.responses import StreamingResponse

from caovan_manager.broadcaster import Broadcaster

KEEPALIVE_S = 15.0


def encode(item: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(item, separators=(',', ':'), default=str)}\n\n".encode()


async def _stream(source: Broadcaster[dict[str, Any]], first: Callable[[], Iterable[dict[str, Any]]],
                  event: str | None) -> AsyncIterator[bytes]:
    async with source.subscribe() as queue:
        # Taken once subscribed, with no await in between: no item is missed between the two, none sent twice.
        for item in list(first()):
            yield encode(item, event)
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                yield b": keepalive\n\n"
                continue
            yield encode(item, event)


def sse_response(source: Broadcaster[dict[str, Any]], first: Callable[[], Iterable[dict[str, Any]]] = tuple,
                 event: str | None = None) -> StreamingResponse:
    """`first`: what the subscriber gets before the live items, read as it subscribes."""
    return StreamingResponse(_stream(source, first, event), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
