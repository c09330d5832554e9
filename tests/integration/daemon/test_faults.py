"""Faults on the real engine under streaming load: graceful restart, kill -9, SIGSTOP. Each prints a SUMMARY line."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from .conftest import INFERENCE_KEY, engine_group_members
from .load import StreamingLoad

pytestmark = pytest.mark.engine


class EventLog:
    """The daemon's /events stream collected in the background."""

    def __init__(self, url: str) -> None:
        self.items: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        time.sleep(0.5)

    def _read(self, url: str) -> None:
        with httpx.stream("GET", f"{url}/events", timeout=None) as stream:
            for line in stream.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("data: "):
                    self.items.append(json.loads(line[6:]))

    def states(self) -> list[dict]:
        return [item for item in self.items if item.get("type") == "state"]

    def close(self) -> None:
        self._stop.set()


def served_after(load: StreamingLoad, moment: float) -> int:
    return sum(1 for o in load.result.ok if o.started > moment)


def test_graceful_restart_under_load_loses_nothing(daemon):
    before = daemon.status()["engine"]["run_id"]
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=3) as load:
        load.wait_for_ok(3, 180)
        response = httpx.post(f"{daemon.url}/restart", headers=daemon.admin(), json={"reason": "test restart"})
        assert response.status_code == 202, response.text
        asked = time.time()
        daemon.wait_state("ready", 420, run_after=before)
        load.wait_for_ok(len(load.result.ok) + 3, 180)
    result = load.result
    print(result.summary("graceful restart", faults=1))
    assert not result.failed and result.unfinished == 0, [o.error for o in result.failed]
    assert served_after(load, asked) >= 3


def test_kill_9_of_the_engine_under_streaming_load(daemon):
    status = daemon.status()
    pid, before = status["engine"]["pid"], status["engine"]["run_id"]
    events = EventLog(daemon.url)
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=3) as load:
        load.wait_for_ok(2, 180)
        os.kill(pid, signal.SIGKILL)
        killed = time.time()
        daemon.wait_state("ready", 420, run_after=before)
        load.wait_for_ok(len(load.result.ok) + 3, 180)
    events.close()
    result = load.result
    print(result.summary("kill -9 of the engine", faults=1))

    noticed = next(e for e in events.states() if e["state"] == "stopping" and "killed by SIGKILL" in e["reason"])
    assert noticed["time"] - killed < 1.0, f"crash noticed after {noticed['time'] - killed:.2f} s"
    assert not engine_group_members({pid}), "processes of the killed engine's group are left"
    assert result.unfinished == 0, "a request hung"
    for failed in result.failed:  # only those in flight at the kill, each with a clear error
        assert failed.started < killed + 1 and ("engine failed" in failed.error or "restarting" in failed.error), \
            failed.error
    assert served_after(load, killed + 1) >= 3
    assert daemon.status()["restarts"] >= 1


def _engine_core(pid: int) -> psutil.Process:
    for child in psutil.Process(pid).children(recursive=True):
        if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
            return child
    raise AssertionError(f"no EngineCore process under the engine pid {pid}")


def test_sigstop_of_the_engine_core_is_detected_as_a_hang_and_recovered(daemon):
    status = daemon.status()
    pid, before = status["engine"]["pid"], status["engine"]["run_id"]
    core = _engine_core(pid)
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2, max_tokens=400) as load:
        load.wait_for_ok(1, 180)
        time.sleep(1)  # requests are running in the engine
        core.send_signal(signal.SIGSTOP)
        stopped = time.time()
        recovered = daemon.wait_state("ready", 480, run_after=before)
        load.wait_for_ok(len(load.result.ok) + 2, 240)
    result = load.result
    print(result.summary("SIGSTOP of the EngineCore", faults=1))
    assert "hung" in recovered["last_error"], recovered["last_error"]
    assert not engine_group_members({pid}), "processes of the stopped engine's group are left"
    assert result.unfinished == 0, "a request hung"
    assert served_after(load, stopped + 1) >= 2
