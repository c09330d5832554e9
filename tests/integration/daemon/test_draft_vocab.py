"""DraftVocab's verified switch on the real CPU engine, through the daemon's API: a hot vocabulary that costs
acceptance is rolled back; the one the daemon learnt from the replies it relayed is kept (and started with from then
on)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest

from caovan_manager.engine.probe import BENCH_PROMPTS

from .conftest import INFERENCE_KEY, DaemonProcess, start_daemon, stop_daemon, wait_verdict

pytestmark = pytest.mark.engine


def switch(daemon: DaemonProcess, setting: object) -> dict:
    started = time.time()
    response = httpx.post(f"{daemon.url}/draft-vocab", json={"setting": setting}, headers=daemon.admin())
    assert response.status_code == 202, response.text
    outcome = wait_verdict(daemon, "/draft-vocab", "switch_in_progress", started)
    daemon.wait_state("ready", 480)
    return outcome


def test_a_costly_hot_set_is_rolled_back_and_the_learnt_one_kept(private_dir):
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
        assert state["last_switch"]["outcome"] == "rolled_back" and daemon.status()["draft_vocab"]["last_switch"]
        logged = httpx.get(f"{daemon.url}/logs", params={"tail": 2000}, headers=daemon.admin()).text
        assert "caovan: DraftVocab switch off -> 256: rolled back: MTP acceptance fell" in logged

        # The user's traffic, through the daemon: the prompts of the verification benchmark, so the hot set learnt
        # from it covers what that benchmark generates.
        early = httpx.post(f"{daemon.url}/draft-vocab", json={"setting": "learnt"}, headers=daemon.admin())
        assert early.status_code == 409 and "draft_vocab.learn_min_tokens = 200 needed" in early.text, early.text
        client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key=INFERENCE_KEY, timeout=300)
        for prompt in BENCH_PROMPTS * 2:
            client.chat.completions.create(model="caovan-demo", messages=[{"role": "user", "content": prompt}],
                                           max_tokens=64, temperature=0, stream=prompt == BENCH_PROMPTS[0])
        deadline = time.monotonic() + 30
        while httpx.get(f"{daemon.url}/draft-vocab").json()["learnt"]["counted_tokens"] < 200:
            assert time.monotonic() < deadline, httpx.get(f"{daemon.url}/draft-vocab").text
            time.sleep(0.5)

        learnt = switch(daemon, "learnt")
        print(f"learnt hot set: {learnt['outcome']}: {learnt['reason']}; {learnt['details']}")
        assert learnt["outcome"] == "activated", learnt
        setting = learnt["details"]["to_draft_vocab"]
        assert Path(setting["file"]).parent.name == "kept" and 0 < setting["size"] < 1024, setting
        state = httpx.get(f"{daemon.url}/draft-vocab").json()
        assert state["setting"] == setting and state["engine"]["active"], state
        assert state["engine"]["hot"] >= setting["size"] and "file" in state["engine"]["detail"], state
        status = daemon.status()
        assert status["draft_vocab"]["setting"] == setting
        assert any(row["kind"] == "plugin_draft_vocab" and row["seen"] for row in status["marker_list"])
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers

    # The kept setting outlives the daemon: a new one on the same state starts the engine with it.
    again = start_daemon(private_dir)
    try:
        state = httpx.get(f"{again.url}/draft-vocab").json()
        assert state["setting"] == setting and state["engine"]["active"], state
    finally:
        assert not stop_daemon(again)
