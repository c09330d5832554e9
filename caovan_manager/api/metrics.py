"""GET /metrics (the daemon's caovan_* series) and /metrics/engine (the engine's own vllm:* page, unchanged)."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Depends, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from caovan_manager.errors import UnknownModel

from .schemas import TEXT, UNAUTHORIZED
from .security import require_metrics_access

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_metrics_access)])


@router.get("/metrics", summary="Prometheus: caovan_* series of the daemon", response_class=Response,
            responses={200: TEXT, **UNAUTHORIZED})
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.daemon.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/metrics/engine", summary="Prometheus: the engine's own vllm:* page, passed through unchanged",
            response_class=Response, responses={
                200: TEXT, **UNAUTHORIZED, 502: {**TEXT, "description": "the engine's /metrics did not answer"},
                404: {**TEXT, "description": "no such model"},
                503: {**TEXT, "description": "the engine is not ready"}})
async def engine_metrics(request: Request, model: str | None = Query(
        None, max_length=128, description="A configured model's name or alias; none = the first model.")) -> Response:
    daemon = request.app.state.daemon
    try:
        slot = daemon.slot(model or None)  # an empty ?model= meant the first model here
    except UnknownModel as exc:
        return Response(f"# {exc}\n", status_code=exc.status, media_type="text/plain")
    upstream = slot.gate.upstream if slot.gate.mode == "open" else None
    if upstream is None:
        return Response(f"# the engine of {slot.name} is {slot.machine.state.value}; its metrics return once it is "
                        f"ready\n", status_code=503, media_type="text/plain", headers={"Retry-After": "10"})
    try:
        response = await upstream.client.get("/metrics", timeout=10)
    except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: the run's client closed as it was stopped
        return Response(f"# the engine's /metrics did not answer: {type(exc).__name__}\n", status_code=502,
                        media_type="text/plain")
    return Response(response.content, status_code=response.status_code,
                    media_type=response.headers.get("content-type", CONTENT_TYPE_LATEST))
