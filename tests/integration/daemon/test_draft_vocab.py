"""DraftVocab's verified switch on the real CPU engine, through the daemon's API: a hot vocabulary that costs
acceptance is rolled back, one that does not is kept (and started with from then on)."""

from __future__ import annotations

import time

import httpx
import pytest

from .conftest import DaemonProcess, start_daemon, stop_daemon

pytestmark = pytest.mark.engine


def wait_switch(daemon: DaemonProcess, started: float, timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = httpx.get(f"{daemon.url}/draft-vocab", timeout=10).json()
        done = [item for item in body["history"] if item["at"] >= started]
        if done and not body["switch_in_progress"]:
            return done[0]
        time.sleep(2)
    raise AssertionError(f"the DraftVocab switch did not finish in {timeout_s} s:\n{daemon.tail()}")


def switch(daemon: DaemonProcess, setting: object) -> dict:
    started = time.time()
    response = httpx.post(f"{daemon.url}/draft-vocab", json={"setting": setting}, headers=daemon.admin())
    assert response.status_code == 202, response.text
    outcome = wait_switch(daemon, started)
    daemon.wait_state("ready", 480)
    return outcome


def test_a_costly_hot_set_is_rolled_back_and_a_harmless_one_kept(private_dir):
    daemon = start_daemon(private_dir)
    try:
        refused = httpx.post(f"{daemon.url}/draft-vocab", json={"setting": True}, headers=daemon.admin())
        assert refused.status_code == 400 and "give the number of token ids" in refused.text
        assert httpx.post(f"{daemon.url}/draft-vocab", json={"setting": 256}).status_code in (401, 403)

        # The tokenizer's first 256 ids are bytes and control tokens: the demo's replies are merged tokens.
        costly = switch(daemon, 256)
        print(f"\ncostly hot set: {costly['outcome']}: {costly['reason']}")
        assert costly["outcome"] == "rolled_back" and "acceptance fell" in costly["reason"], costly
        assert costly["details"]["candidate"]["acceptance_rate"] < costly["details"]["baseline"]["acceptance_rate"]
        state = httpx.get(f"{daemon.url}/draft-vocab").json()
        assert state["setting"] is None and state["engine"] is None, state

        harmless = switch(daemon, 768)
        print(f"harmless hot set: {harmless['outcome']}: {harmless['reason']}; {harmless['details']}")
        assert harmless["outcome"] == "activated", harmless
        state = httpx.get(f"{daemon.url}/draft-vocab").json()
        assert state["setting"] == 768 and state["engine"]["active"] and state["engine"]["hot"] == 768, state
        status = daemon.status()
        assert status["draft_vocab"]["setting"] == 768
        assert any(row["kind"] == "plugin_draft_vocab" and row["seen"] for row in status["marker_list"])
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers

    # The kept setting outlives the daemon: a new one on the same state starts the engine with it.
    again = start_daemon(private_dir)
    try:
        state = httpx.get(f"{again.url}/draft-vocab").json()
        assert state["setting"] == 768 and state["engine"]["hot"] == 768, state
    finally:
        assert not stop_daemon(again)
