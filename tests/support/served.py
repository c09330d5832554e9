"""The daemon served by real uvicorn on a free port, in a thread, with its engine stopped: for tests of its HTTP
surface over real sockets (the relay's faults, the property tests of the REST API)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from caovan_manager.app import create_app
from caovan_manager.config import load_settings
from caovan_manager.daemon import Daemon
from caovan_manager.engine.launch import EngineTarget


@dataclass
class ServedDaemon:
    url: str
    daemon: Daemon
    loop: asyncio.AbstractEventLoop

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn in the daemon's loop (the gate belongs to it) and return its result."""
        async def inside() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(inside(), self.loop).result(10)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 10) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.call(predicate):
                return True
            time.sleep(0.05)
        return False

    def requests_counted(self, status: str) -> float:
        value = self.daemon.metrics.registry.get_sample_value(
            "caovan_proxy_requests_total", {"model": "/models/none", "endpoint": "/v1/chat/completions",
                                            "status": status})
        return value or 0.0


@contextlib.contextmanager
def served_daemon(tmp_path, model: str = "/models/none", **overrides: Any) -> Iterator[ServedDaemon]:
    settings = load_settings(state_dir=str(tmp_path), **overrides)
    app = create_app(settings, EngineTarget(model, []), autostart=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield ServedDaemon(f"http://127.0.0.1:{port}", app.state.daemon, loop)
    finally:
        server.should_exit = True
        thread.join(30)
        loop.close()
