"""/v1/*: the OpenAI API relayed to the engine, streaming chunk by chunk.

A Router (caovan_manager.models.router) picks the engine of each request: the one engine, or, with a models table,
the one its `model` names; it also lets the daemon answer a request itself (the model list, an unknown model).

Requests wait at the gate while the engine is not ready (bounded queue, bounded wait, then a 503 with Retry-After).
A request whose connection to the engine cannot be made is put back at the gate, since the engine never saw it; one
that fails after the engine took it gets a clear error (a 502, or an error event inside a started stream), never a
silent hang: the read timeout bounds every silence. A client that goes away, at any point, closes the engine
connection, so vLLM aborts the request.

Every proxied request and every streamed chunk passes here, so this is a plain ASGI app mounted at /v1 rather than
a FastAPI route (no request objects, dependency solving or response classes), and it talks to the engine with
aiohttp: per request it costs about a third of the CPU of httpx's transport (measured; docs/benchmarks.md), and
that cost is paid in the daemon's single event loop by every request of a burst.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
from yarl import URL

from caovan_manager.config import SecuritySettings
from caovan_manager.errors import BadRouteRequest, NotRelayed, Unavailable
from caovan_manager.keys import inference_key_accepted, refusal
from caovan_manager.metrics import DaemonMetrics

from .allowlist import UNMATCHED_LABEL, match
from .routes import Answer, Route, Router
from .sampling import sampling_refusal
from .upstream import BASE_URL

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Not forwarded: connection-level headers, the client's key (the engine has its own, or none), and compression
# (the engine's bytes pass through as they are).
DROP_REQUEST = {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade",
                b"authorization", b"accept-encoding", b"proxy-authorization"}
DROP_RESPONSE = {b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"content-encoding",
                 b"server", b"date"}
RECONNECT_PAUSE_S = 0.25
# How a relayed exchange with the engine can fail (answered 502, or an error event in a started stream).
ENGINE_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError)


class OpenAIRelay:
    """The ASGI app behind /v1. Each engine run brings its own connection pool (caovan_manager.proxy.upstream), which
    the gate hands out with each admission."""

    def __init__(self, security: SecuritySettings, metrics: DaemonMetrics, max_body_bytes: int) -> None:
        self.security, self.metrics, self.max_body_bytes = security, metrics, max_body_bytes
        self.router: Router | None = None

    def start(self, router: Router) -> None:
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # a WebSocket: vLLM's realtime API is not relayed
            await send({"type": "websocket.close", "code": 1003,
                        "reason": "the daemon relays HTTP only; vLLM's WebSocket (realtime) API is not served"})
            return
        exchange = _Exchange(self, scope, receive, send)
        task = asyncio.current_task()
        watcher: asyncio.Task | None = None
        try:
            if not await exchange.read_request():
                return
            # From here on, a client that disconnects cancels the exchange, wherever it waits.
            watcher = asyncio.get_running_loop().create_task(exchange.watch_disconnect(task))
            await exchange.run()
        except asyncio.CancelledError:
            if not exchange.client_gone:
                raise
            if hasattr(task, "uncancel"):  # Python 3.11+: this cancellation was ours and is handled
                task.uncancel()
        finally:
            if watcher is not None:
                watcher.cancel()
            exchange.finish()


class _Exchange:
    """One request through the relay."""

    def __init__(self, relay: OpenAIRelay, scope: Scope, receive: Receive, send: Send) -> None:
        self.relay, self.scope, self.receive, self.send = relay, scope, receive, send
        self.path = scope["path"][len("/v1/"):]
        self.label = UNMATCHED_LABEL
        self.route: Route | None = None
        self.started = time.perf_counter()
        self.status = "499"  # until the engine answers: the client went away first
        self.body = b""
        self.headers: dict[str, str] = {}
        self.response: aiohttp.ClientResponse | None = None
        self.admitted = False
        self.client_gone = False
        self.reply: list[bytes] | None = None  # the reply's chunks, kept for the token tally when it counts them

    async def read_request(self) -> bool:
        """Check the key, read the body; False if the request ends here (refused, or the client left)."""
        authorization, declared = None, b""
        headers = self.headers
        for name, value in self.scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"content-length":  # not forwarded (the relay sends its own), but the client's promise
                declared = value
            elif name not in DROP_REQUEST:
                headers[name.decode("latin-1")] = value.decode("latin-1")
        if not inference_key_accepted(self.relay.security, authorization):
            await self.error(401, refusal("the OpenAI API"), "authentication_error", {"WWW-Authenticate": "Bearer"})
            return False
        try:
            self.label = match(self.scope["method"], self.path).label
        except NotRelayed as exc:
            await self.error(exc.status, str(exc), "NotFoundError" if exc.status == 404 else "MethodNotAllowed")
            return False
        limit = self.relay.max_body_bytes
        if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):  # (int() refuses 4,300 digits)
            await self.too_large()
            return False
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.client_gone = True
                return False
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # a chunked body, or one longer than it said
                await self.too_large()
                return False
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        self.body = b"".join(chunks)
        try:
            route = self.relay.router.route(self.scope["method"], self.path, self.body, headers.get("content-type", ""))
        except BadRouteRequest as exc:
            await self.send_json(exc.status, exc.document())
            return False
        if isinstance(route, Answer):
            await self.send_json(route.status, route.document)
            return False
        self.route = route
        headers.update(self.route.engine_headers)
        if route.tally is not None and route.tally.wants(self.label):
            self.reply = []
        return True

    async def watch_disconnect(self, exchange_task: asyncio.Task) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.client_gone = True
        exchange_task.cancel()

    async def run(self) -> None:
        if not await self.connect():
            return
        response = self.response
        self.status = str(response.status)
        headers = [(name, value) for name, value in response.raw_headers if name.lower() not in DROP_RESPONSE]
        if response.content_type == "text/event-stream":
            await self.stream(response, headers)
            return
        try:
            content = await response.read()
        except ENGINE_FAILURES as exc:
            await self.error(502, _failure(exc), "engine_error")
            return
        headers.append((b"content-length", str(len(content)).encode()))
        await self.send({"type": "http.response.start", "status": response.status, "headers": headers})
        await self.send({"type": "http.response.body", "body": content})
        if self.reply is not None:
            if len(content) <= self.route.tally.reply_cap:
                self.reply.append(content)
            else:
                self.reply = None
                self.route.tally.skip()

    async def connect(self) -> bool:
        """Admission, then the request to the engine up to its response headers; False if answered with an error."""
        gate = self.route.gate
        scope = self.scope
        query = scope["query_string"]
        # The path as the client sent it (the front door refused every form another parser could read differently),
        # passed on byte for byte: aiohttp would otherwise normalise it again.
        target = scope.get("raw_path", scope["path"].encode()).decode("latin-1") + (
            "?" + query.decode("latin-1") if query else "")
        loop = asyncio.get_running_loop()
        deadline = gate.deadline()  # one wait for all tries: queued, refused by a dying engine, queued again
        while True:
            try:
                upstream = await gate.enter(deadline)
            except Unavailable as exc:
                await self.error(exc.status, exc.reason, "engine_unavailable", {"Retry-After": str(exc.retry_after_s)})
                return False
            self.admitted = True
            refused = self._sampling_refusal()
            if refused is not None:
                await self.error(400, refused, "BadRequestError")
                return False
            try:
                self.response = await upstream.relay.request(scope["method"], URL(BASE_URL + target, encoded=True),
                                                             headers=self.headers, data=self.body,
                                                             allow_redirects=False)
                return True
            except aiohttp.ClientConnectorError:
                # The engine went away between admission and connect; it never saw this request: wait for the next.
                self.admitted = False
                gate.leave()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    await self.error(503, f"the engine is not reachable (it is restarting); this request waited "
                                          f"{gate.queue_wait_s:g} s (proxy.queue_wait_s); retry",
                                     "engine_unavailable", {"Retry-After": str(gate.retry_after_s)})
                    return False
                await asyncio.sleep(min(RECONNECT_PAUSE_S, remaining))
            except ENGINE_FAILURES as exc:
                await self.error(502, _failure(exc), "engine_error")
                return False

    def _sampling_refusal(self) -> str | None:
        """Checked once admitted: only then is the engine's launch (and so what it can decode) known."""
        greedy_only = self.route.greedy_only()
        return None if greedy_only is None else sampling_refusal(self.label, self.body, greedy_only)

    async def stream(self, response: aiohttp.ClientResponse, headers: list[tuple[bytes, bytes]]) -> None:
        send = self.send
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        first = True
        reply = self.reply
        kept, cap = 0, self.route.tally.reply_cap if reply is not None else 0
        try:
            async for chunk in response.content.iter_any():
                if first:
                    self.relay.metrics.proxy_ttft.labels(self.model, self.label).observe(
                        time.perf_counter() - self.started)
                    first = False
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if reply is not None:
                    reply.append(chunk)
                    kept += len(chunk)
                    if kept > cap:  # held no longer than the tally could take it
                        reply = self.reply = None
                        self.route.tally.skip()
        except ENGINE_FAILURES as exc:
            self.status = "502"
            error = {"error": {"message": _failure(exc), "type": "engine_error", "code": 502}}
            await send({"type": "http.response.body", "body": f"data: {json.dumps(error)}\n\n".encode(),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def too_large(self) -> None:
        await self.error(413, f"the request body is larger than the daemon relays (proxy.max_body_mib = "
                              f"{self.relay.max_body_bytes >> 20}); send a smaller one, or raise the setting",
                         "BadRequestError", {"Connection": "close"})

    async def error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        await self.send_json(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    async def send_json(self, status: int, document: Any, headers: dict[str, str] | None = None) -> None:
        self.status = str(status)
        body = json.dumps(document).encode()
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
        await self.send({"type": "http.response.start", "status": status, "headers": raw})
        await self.send({"type": "http.response.body", "body": body})

    @property
    def model(self) -> str:
        return self.route.model if self.route else "unknown"

    def finish(self) -> None:
        """Runs once per request, however it ended: the engine connection, the gate, the metrics."""
        if self.response is not None:
            # Back to the pool only when fully read; anything else closes it, which aborts the request in vLLM.
            if self.response.content.at_eof():
                self.response.release()
            else:
                self.response.close()
        if self.admitted:
            self.route.gate.leave()
        if self.reply and self.status == "200":
            self.route.tally.offer(self.reply)
        metrics = self.relay.metrics
        metrics.proxy_requests.labels(self.model, self.label, self.status).inc()
        if self.response is not None:  # requests the engine answered; refusals and queue timeouts are not latency
            metrics.proxy_latency.labels(self.model, self.label).observe(time.perf_counter() - self.started)


def _failure(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return (f"the engine sent nothing for the proxy's read timeout ({type(exc).__name__}); the request was "
                f"abandoned. If the engine is hung the daemon restarts it; retry")
    return (f"the engine failed while serving this request ({type(exc).__name__}); the daemon is restarting it. "
            f"Retry the request")
