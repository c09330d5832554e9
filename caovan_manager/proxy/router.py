"""/v1/*: the OpenAI API passed through to the engine, streaming chunk by chunk.

Requests wait at the gate while the engine is not ready (bounded queue, bounded wait, then a 503 with Retry-After).
A request whose connection to the engine cannot be made is put back at the gate, since the engine never saw it; one
that fails after the engine took it gets a clear error (a 502, or an error event inside a started stream), never a
silent hang: the read timeout bounds every silence.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import anyio
import httpx
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from caovan_manager.api.security import require_inference
from caovan_manager.metrics import DaemonMetrics

from .gate import Gate, Unavailable

router = APIRouter(tags=["openai"])

# Not forwarded: connection-level headers, the client's key (the engine has its own, or none), and compression
# (the engine's bytes pass through as they are).
DROP_REQUEST = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                "authorization", "accept-encoding", "proxy-authorization"}
DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding", "server",
                 "date"}
KNOWN_ENDPOINTS = ("chat/completions", "completions", "models", "embeddings", "responses", "tokenize", "detokenize",
                   "audio", "score", "rerank")
RECONNECT_PAUSE_S = 0.25


def endpoint_label(path: str) -> str:
    for known in KNOWN_ENDPOINTS:
        if path == known or path.startswith(known + "/"):
            return "/v1/" + known
    return "/v1/other"


def openai_error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status,
                        headers=headers)


async def proxy(path: str, request: Request) -> Response:
    daemon = request.app.state.daemon
    gate: Gate = daemon.gate
    client: httpx.AsyncClient = daemon.proxy_client
    metrics = daemon.metrics
    label = endpoint_label(path)
    started = time.perf_counter()
    body = await request.body()
    query = f"?{request.url.query}" if request.url.query else ""
    headers = {name: value for name, value in request.headers.items() if name.lower() not in DROP_REQUEST}
    headers.update(daemon.effects.engine_headers)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + gate.queue_wait_s

    while True:
        try:
            upstream = await gate.enter()
        except Unavailable as exc:
            metrics.proxy_requests.labels(label, "503").inc()
            return openai_error(503, exc.reason, "engine_unavailable", {"Retry-After": str(exc.retry_after_s)})
        upstream_request = client.build_request(request.method, f"{upstream}/v1/{path}{query}", headers=headers,
                                                content=body)
        try:
            # Straight to the transport: a relay wants none of the client's layers (auth, redirects, and above all
            # its cookie jar, which would carry one user's cookies into everyone's requests), and they cost CPU.
            response = await daemon.proxy_transport.handle_async_request(upstream_request)
            break
        except httpx.ConnectError:
            # The engine went away between admission and connect; it never saw this request: wait for the next one.
            gate.leave()
            if loop.time() >= deadline:
                metrics.proxy_requests.labels(label, "503").inc()
                return openai_error(503, "the engine is not reachable (it is restarting); retry", "engine_unavailable",
                                    {"Retry-After": str(gate.retry_after_s)})
            await asyncio.sleep(RECONNECT_PAUSE_S)
        except httpx.HTTPError as exc:
            gate.leave()
            metrics.proxy_requests.labels(label, "502").inc()
            return openai_error(502, _failure(exc), "engine_error")

    status = str(response.status_code)
    response_headers = {name: value for name, value in response.headers.items()
                        if name.lower() not in DROP_RESPONSE}
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        relay = _Relay(response, gate, metrics, label, status, started)
        return _RelayResponse(relay, status_code=response.status_code, headers=response_headers)
    try:
        content = await response.aread()
    except httpx.HTTPError as exc:
        metrics.proxy_requests.labels(label, "502").inc()
        return openai_error(502, _failure(exc), "engine_error")
    finally:
        await response.aclose()
        gate.leave()
    metrics.proxy_requests.labels(label, status).inc()
    metrics.proxy_latency.labels(label).observe(time.perf_counter() - started)
    return Response(content, status_code=response.status_code, headers=response_headers)


for _method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
    router.add_api_route("/v1/{path:path}", proxy, methods=[_method], dependencies=[Depends(require_inference)],
                         operation_id=f"openai_{_method.lower()}", summary="OpenAI-compatible API (to the engine)")


class _Relay:
    """One engine stream passed through as it arrives. A client that goes away cancels the iteration, which closes
    the engine connection, and vLLM aborts the request. close() runs exactly once, also when the response is never
    iterated (a client gone before the first byte)."""

    def __init__(self, response: httpx.Response, gate: Gate, metrics: DaemonMetrics, label: str, status: str,
                 started: float) -> None:
        self.response, self.gate, self.metrics = response, gate, metrics
        self.label, self.status, self.started = label, status, started
        self.closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        first = True
        try:
            async for chunk in self.response.aiter_raw():
                if first:
                    self.metrics.proxy_ttft.labels(self.label).observe(time.perf_counter() - self.started)
                    first = False
                yield chunk
        except httpx.HTTPError as exc:
            self.status = "502"
            error = {"error": {"message": _failure(exc), "type": "engine_error", "code": 502}}
            yield f"data: {json.dumps(error)}\n\n".encode()
        finally:
            await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.gate.leave()
        self.metrics.proxy_requests.labels(self.label, self.status).inc()
        self.metrics.proxy_latency.labels(self.label).observe(time.perf_counter() - self.started)
        # Also when the client's disconnect cancelled us: the engine must see the connection close.
        with anyio.CancelScope(shield=True):
            await self.response.aclose()


class _RelayResponse(StreamingResponse):
    def __init__(self, relay: _Relay, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(relay.chunks(), status_code=status_code, headers=headers)
        self.relay = relay

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001  (ASGI)
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.relay.close()


def _failure(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return (f"the engine sent nothing for the proxy's read timeout ({type(exc).__name__}); the request was "
                f"abandoned. If the engine is hung the daemon restarts it; retry")
    return (f"the engine failed while serving this request ({type(exc).__name__}); the daemon is restarting it. "
            f"Retry the request")
