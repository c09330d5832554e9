"""Faults on the real engine under streaming load: graceful restart, kill -9, SIGSTOP. Each prints a SUMMARY line."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from .conftest import INFERENCE_KEY, engine_group_members
from .load import EventLog, StreamingLoad

pytestmark = pytest.mark.engine


def test_graceful_restart_under_load_loses_nothing(daemon):
    before = daemon.status()["engine"]["run_id"]
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=3) as load:
        load.wait_for_ok(3, 180)
        response = httpx.post(f"{daemon.url}/restart", headers=daemon.admin(), json={"reason": "test restart"})
        assert response.status_code == 202, response.text
        asked = time.time()
        daemon.wait_state("ready", 420, run_after=before)
        load.wait_for_ok(3, 180, started_after=asked)
    result = load.result
    print(result.summary("graceful restart", faults=1))
    assert not result.failed and result.unfinished == 0, [o.error for o in result.failed]


def test_kill_9_of_the_engine_under_streaming_load(daemon):
    status = daemon.status()
    pid, before = status["engine"]["pid"], status["engine"]["run_id"]
    events = EventLog(daemon.url)
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=3) as load:
        load.wait_for_ok(2, 180)
        os.kill(pid, signal.SIGKILL)
        killed = time.time()
        daemon.wait_state("ready", 420, run_after=before)
        load.wait_for_ok(3, 180, started_after=killed + 1)
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
        load.wait_for_ok(2, 240, started_after=stopped + 1)
    result = load.result
    print(result.summary("SIGSTOP of the EngineCore", faults=1))
    assert "hung" in recovered["last_error"], recovered["last_error"]
    # /status says why the detector acted: its verdict, kept past the restart.
    assert "no token generated for" in recovered["hang_detector"]["last_verdict"], recovered["hang_detector"]
    assert not engine_group_members({pid}), "processes of the stopped engine's group are left"
    assert result.unfinished == 0, "a request hung"


def test_a_slow_but_progressing_generation_is_never_taken_for_a_hang(daemon):
    """The EngineCore is stopped and continued in turns (5 s stopped, 1 s running) for three hang timeouts: the
    streams crawl, every silence is shorter than the timeout, so the detector must not act however long it goes.
    A fast machine finishes one stream inside three timeouts even so; the next starts at once, throttled alike."""
    status = daemon.status()
    pid, run_id = status["engine"]["pid"], status["engine"]["run_id"]
    timeout_s = status["hang_detector"]["timeout_s"]
    core = _engine_core(pid)
    gaps: list[float] = []
    stop_throttle = threading.Event()

    def throttle() -> None:
        while not stop_throttle.is_set():
            core.send_signal(signal.SIGSTOP)
            stop_throttle.wait(5)
            core.send_signal(signal.SIGCONT)
            stop_throttle.wait(1)

    body = {"model": "caovan-demo", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 1900,
            "ignore_eos": True, "stream": True}
    thread = threading.Thread(target=throttle, daemon=True)
    started = time.monotonic()
    until = started + 3 * timeout_s + 10  # long past three hang timeouts, still producing
    streams = 0
    try:
        last = None
        while time.monotonic() < until:
            streams += 1
            with httpx.stream("POST", f"{daemon.url}/v1/chat/completions", json=body, timeout=60,
                              headers={"Authorization": f"Bearer {INFERENCE_KEY}"}) as stream:
                for line in stream.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    now = time.monotonic()
                    if last is None:
                        thread.start()
                    else:
                        gaps.append(now - last)
                    last = now
                    if now > until:
                        break
    finally:
        stop_throttle.set()
        if thread.is_alive():
            thread.join(10)
        core.send_signal(signal.SIGCONT)
    after = daemon.status()
    print(f"SUMMARY slow generation: {time.monotonic() - started:.0f} s of {streams} throttled stream(s), longest silence "
          f"{max(gaps):.1f} s, hang timeout {timeout_s:g} s; detector: {after['hang_detector']}")
    assert time.monotonic() - started > 3 * timeout_s
    assert max(gaps) > 3, "the throttle did not slow the stream"
    assert after["state"] == "ready" and after["engine"]["run_id"] == run_id, after["reason"]
    assert after["hang_detector"]["last_verdict"] is None or after["hang_detector"]["last_verdict_s_ago"] > \
        time.monotonic() - started, "the detector acted during the slow generation"
