"""GET /logs?tail=N, /logs/stream and /events (server-sent events for the dashboard)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from caovan_manager.errors import UnknownModel
from caovan_manager.logwatch.sink import LogSink

from .schemas import EVENT_STREAM, LogTail, Problem
from .sse import sse_response
from .status import status_document

router = APIRouter(tags=["logs"])


MODEL = Query(None, max_length=128, description="A configured model's name or alias; none = the first model.")


def model_sink(request: Request, model: str | None) -> LogSink:
    try:
        return request.app.state.daemon.slot(model).sink
    except UnknownModel as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None


@router.get("/logs", summary="The last N lines of an engine's output (and the daemon's notes about it)",
            response_model=LogTail, responses={404: {"model": Problem, "description": "no such model"}})
async def logs(request: Request, tail: int = Query(200, ge=0, le=100_000), model: str | None = MODEL) -> dict[str, Any]:
    sink = model_sink(request, model)
    return {"lines": sink.tail(tail), "file": str(sink.path) if sink.path else None}


@router.get("/logs/stream", summary="Engine output as server-sent events, starting with the last N lines",
            response_class=StreamingResponse,
            responses={200: EVENT_STREAM, 404: {"model": Problem, "description": "no such model"}})
async def logs_stream(request: Request, tail: int = Query(50, ge=0, le=10_000),
                      model: str | None = MODEL) -> StreamingResponse:
    sink = model_sink(request, model)
    return sse_response(sink.live, lambda: sink.tail(tail))


@router.get("/events", summary="State changes, samples, markers and activations as server-sent events: first the "
                               "status, then the last ten minutes of samples and changes, then live",
            response_class=StreamingResponse, responses={200: EVENT_STREAM})
async def events(request: Request) -> StreamingResponse:
    daemon = request.app.state.daemon
    return sse_response(daemon.events, lambda: [{"type": "status", **status_document(daemon)},
                                                *daemon.recent_events.items()])
