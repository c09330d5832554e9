"""The recent past a new /events subscriber is sent: the samples and changes of the last ten minutes, oldest first."""

from __future__ import annotations

import json
import time

import httpx

from caovan_manager.supervisor.recent import RecentEvents
from tests.support.served import served_daemon


def sample(at: float, kind: str = "spec_decode", model: str = "m") -> dict:
    return {"type": "log_event", "kind": kind, "time": at, "model": model, "acceptance_rate": 0.5}


def test_only_samples_and_changes_of_the_window_are_kept_oldest_first():
    now = [1000.0]
    recent = RecentEvents(window_s=600, max_items=100, clock=lambda: now[0])
    recent.record(sample(390.0))  # older than the window
    recent.record(sample(400.0))
    recent.record({"type": "log_event", "kind": "marker", "time": 410.0})  # in /status, not replayed
    recent.record({"type": "state", "time": 420.0, "state": "ready"})
    recent.record({"type": "status", "time": 430.0})
    recent.record(sample(430.0, "throughput"))
    assert [(item["type"], item["time"]) for item in recent.items()] == [
        ("log_event", 400.0), ("state", 420.0), ("log_event", 430.0)]
    now[0] = 1021.0
    assert [item["time"] for item in recent.items()] == [430.0]


def test_the_count_is_bounded_whatever_the_rate():
    recent = RecentEvents(window_s=600, max_items=3, clock=lambda: 10.0)
    for at in range(8):
        recent.record(sample(float(at)))
    assert [item["time"] for item in recent.items()] == [5.0, 6.0, 7.0]


def test_a_new_subscriber_gets_the_status_then_the_recent_past_then_live_events(tmp_path):
    with served_daemon(tmp_path) as served:
        served.call(served.daemon.events.publish, sample(time.time() - 30))
        served.call(served.daemon.events.publish, {"type": "state", "time": time.time() - 20,
                                                   "model": "m", "state": "ready"})
        received = []
        with httpx.stream("GET", f"{served.url}/events", timeout=httpx.Timeout(10, read=5)) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(json.loads(line[6:]))
                if len(received) == 3:
                    served.call(served.daemon.events.publish, sample(time.time()))
                if len(received) == 4:
                    break
        assert [item["type"] for item in received] == ["status", "log_event", "state", "log_event"]
        assert received[1]["time"] < received[2]["time"] < received[3]["time"]
