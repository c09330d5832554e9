"""GET /logs?tail=N, /logs/stream and /events (server-sent events for the dashboard)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from .schemas import EVENT_STREAM, LogTail
from .sse import sse_response
from .status import status_document

router = APIRouter(tags=["logs"])


@router.get("/logs", summary="The last N lines of the engine's output (and the daemon's notes about it)",
            response_model=LogTail)
async def logs(request: Request, tail: int = Query(200, ge=0, le=100_000)) -> dict[str, Any]:
    sink = request.app.state.daemon.sink
    return {"lines": sink.tail(tail), "file": str(sink.path) if sink.path else None}


@router.get("/logs/stream", summary="Engine output as server-sent events, starting with the last N lines",
            response_class=StreamingResponse, responses={200: EVENT_STREAM})
async def logs_stream(request: Request, tail: int = Query(50, ge=0, le=10_000)) -> StreamingResponse:
    sink = request.app.state.daemon.sink
    return sse_response(sink.live, sink.tail(tail))


@router.get("/events", summary="State changes, samples, markers and activations as server-sent events",
            response_class=StreamingResponse, responses={200: EVENT_STREAM})
async def events(request: Request) -> StreamingResponse:
    daemon = request.app.state.daemon
    first = {"type": "status", **status_document(daemon)}
    return sse_response(daemon.events, [first])
