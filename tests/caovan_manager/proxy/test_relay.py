"""The /v1 relay over real sockets (uvicorn serving the daemon), for what the real engine cannot be made to show in
a unit test: an engine that accepts a request and then stays silent past the read timeout (a stand-in named
SilentEngine), one that sends each stream event only once the client has read the one before (PacedEngine: vLLM
merges the deltas a slow reader has not picked up, so the real engine's chunk count proves nothing about the relay),
and a client that gives up while its request waits in the queue. Client disconnects during a stream and an engine
killed mid-stream are tested on the real engine (tests/integration/daemon)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import aiohttp.web
import httpx
import pytest

from caovan_manager.proxy.upstream import Upstream, open_upstream
from tests.support.raw_http import json_post_head, oversized_answers, raw_exchange
from tests.support.served import ServedDaemon, served_daemon


class SilentEngine:
    """A stand-in for an engine that takes a request and never answers (a hang the read timeout must end)."""

    def __init__(self) -> None:
        self.requests_seen = 0
        self.closed_by_peer = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests_seen += 1
        while await reader.read(65536):
            pass
        self.closed_by_peer += 1
        writer.close()

    def start(self, served: ServedDaemon, socket_path: Path) -> Upstream:
        async def listen() -> None:
            await asyncio.start_unix_server(self.handle, str(socket_path))
        asyncio.run_coroutine_threadsafe(listen(), served.loop).result(10)
        return upstream_at(served, socket_path)


class PacedEngine:
    """A stand-in for a streaming engine that sends its next event only after the client has read the previous one
    through the daemon: a relay that held back any part of a stream would stall it on the first event."""

    EVENTS = [f'data: {{"choices": [{{"index": 0, "delta": {{"content": "piece {n}"}}}}]}}\n\n'.encode()
              for n in range(5)] + [b"data: [DONE]\n\n"]

    def __init__(self) -> None:
        self.read_by_client = [threading.Event() for _ in self.EVENTS]

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        await request.read()
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event, read in zip(self.EVENTS, self.read_by_client):
            await response.write(event)
            # Wait in a worker thread: the daemon shares this loop and must keep relaying meanwhile.
            if not await asyncio.to_thread(read.wait, 10):
                break  # the client never saw this event: end the stream short, which the test reports
        await response.write_eof()
        return response

    def start(self, served: ServedDaemon, socket_path: Path) -> Upstream:
        async def listen() -> None:
            app = aiohttp.web.Application()
            app.router.add_post("/v1/chat/completions", self.handle)
            runner = aiohttp.web.AppRunner(app)
            await runner.setup()
            await aiohttp.web.UnixSite(runner, str(socket_path)).start()
        asyncio.run_coroutine_threadsafe(listen(), served.loop).result(10)
        return upstream_at(served, socket_path)


def upstream_at(served: ServedDaemon, socket_path: Path) -> Upstream:
    """The clients of an engine run listening at socket_path, made in the daemon's loop as its effects make them."""
    return served.call(open_upstream, socket_path, served.daemon.settings.proxy, {})


CHAT = {"model": "caovan-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_an_engine_silent_past_the_read_timeout_gets_a_clear_502(tmp_path):
    with served_daemon(tmp_path, proxy={"read_timeout_s": 0.5}) as served:
        engine = SilentEngine()
        upstream = engine.start(served, tmp_path / "silent.sock")
        served.call(served.daemon.primary.gate.open, upstream)
        started = time.monotonic()
        response = httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, timeout=30)
        waited = time.monotonic() - started
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["type"] == "engine_error" and "read timeout" in error["message"], error
        assert 0.4 < waited < 10, waited
        assert engine.requests_seen == 1
        # The abandoned request's connection is closed (vLLM would abort it) and its place at the gate is free.
        assert served.wait_for(lambda: engine.closed_by_peer == 1), "the engine connection was left open"
        assert served.call(lambda: served.daemon.primary.gate.in_flight) == 0
        assert served.requests_counted("502") == 1


def test_a_stream_is_relayed_event_by_event_as_the_engine_sends_it(tmp_path):
    with served_daemon(tmp_path) as served:
        engine = PacedEngine()
        served.call(served.daemon.primary.gate.open, engine.start(served, tmp_path / "paced.sock"))
        received: list[bytes] = []
        with httpx.stream("POST", f"{served.url}/v1/chat/completions", json={**CHAT, "stream": True},
                          timeout=httpx.Timeout(30, read=5)) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            buffer = b""
            for data in response.iter_raw():
                buffer += data
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    received.append(event + b"\n\n")
                    engine.read_by_client[len(received) - 1].set()
        assert received == PacedEngine.EVENTS
        # Counted when the relay's exchange ends, which can be just after the client has read the last byte.
        assert served.wait_for(lambda: served.requests_counted("200") == 1), served.requests_counted("200")


def test_a_client_that_leaves_the_queue_frees_its_place(tmp_path):
    with served_daemon(tmp_path, proxy={"queue_size": 1, "queue_wait_s": 60}) as served:
        gate = served.daemon.primary.gate
        served.call(gate.hold, "the engine is restarting (test)")
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, timeout=httpx.Timeout(30, read=0.5))
        assert served.wait_for(lambda: gate.waiting == 0), "the request stayed queued after its client left"
        assert served.requests_counted("499") == 1
        # Its place is free: the queue holds one, and the next request waits in it instead of a 503 "queue full".
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, timeout=httpx.Timeout(30, read=0.5))
        assert served.wait_for(lambda: gate.waiting == 0)
        assert served.requests_counted("499") == 2 and served.requests_counted("503") == 0


def dead_engine(served: ServedDaemon, tmp_path: Path) -> Upstream:
    """The clients of a socket nothing listens on: what the relay meets when the engine died under it."""
    return upstream_at(served, tmp_path / "dead.sock")


def timed_post(served: ServedDaemon) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, timeout=30)
    return response, time.monotonic() - started


def test_a_request_meeting_a_dead_engine_then_the_queue_waits_queue_wait_s_in_all(tmp_path):
    # The engine just crashed: the gate is still open on its dead port until the supervisor notices and holds.
    with served_daemon(tmp_path, proxy={"queue_wait_s": 1}) as served:
        gate = served.daemon.primary.gate
        served.call(gate.open, dead_engine(served, tmp_path))
        served.call(lambda: served.loop.call_later(0.5, gate.hold, "the engine is restarting (test)"))
        response, waited = timed_post(served)
        assert response.status_code == 503, response.text
        assert waited < 1.2, f"503 after {waited:.2f} s with proxy.queue_wait_s = 1"
        assert "waited 1 s (proxy.queue_wait_s)" in response.json()["error"]["message"]


def test_a_request_queued_through_a_restart_onto_a_dead_engine_waits_queue_wait_s_in_all(tmp_path):
    # Queued while the engine restarts; the gate opens on an engine that dies at once, then holds again.
    with served_daemon(tmp_path, proxy={"queue_wait_s": 1}) as served:
        gate = served.daemon.primary.gate
        served.call(gate.hold, "the engine is restarting (test)")
        upstream = dead_engine(served, tmp_path)

        def restart_that_fails() -> None:
            served.loop.call_later(0.4, gate.open, upstream)
            served.loop.call_later(0.55, gate.hold, "the engine is restarting again (test)")
        served.call(restart_that_fails)
        response, waited = timed_post(served)
        assert response.status_code == 503, response.text
        assert 0.9 < waited < 1.2, f"503 after {waited:.2f} s with proxy.queue_wait_s = 1"
        message = response.json()["error"]["message"]
        assert "waited 1 s (proxy.queue_wait_s)" in message and "restarting again" in message, message


def test_a_body_over_proxy_max_body_mib_gets_a_413_and_never_reaches_the_engine(tmp_path):
    with served_daemon(tmp_path, proxy={"max_body_mib": 1, "read_timeout_s": 0.5}) as served:
        engine = SilentEngine()
        served.call(served.daemon.primary.gate.open, engine.start(served, tmp_path / "silent.sock"))
        port = int(served.url.rsplit(":", 1)[1])
        # Declared too large, answered before a byte of the body is sent; and chunked, once past the limit.
        for response in oversized_answers(port, "/v1/completions", 1 << 20):
            assert response.startswith(b"HTTP/1.1 413 "), response[:200]
            assert b"proxy.max_body_mib = 1" in response, response[-300:]
        assert engine.requests_seen == 0
        # A body under the limit goes on to the engine (this one stays silent: a 502 after the read timeout).
        under = json.dumps({**CHAT, "prompt": "x" * ((1 << 20) - 1000)}).encode()
        head = json_post_head(port, "/v1/completions")
        relayed = raw_exchange(port, head + f"Content-Length: {len(under)}\r\n\r\n".encode(), [under])
        assert relayed.startswith(b"HTTP/1.1 502 "), relayed[:200]
        assert engine.requests_seen == 1
        counted = served.daemon.metrics.registry.get_sample_value(
            "caovan_proxy_requests_total", {"model": "unknown", "endpoint": "/v1/completions", "status": "413"})
        assert counted == 2  # the body, which names the model, was never read
        assert served.call(lambda: served.daemon.primary.gate.in_flight) == 0
