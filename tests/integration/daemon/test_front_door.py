"""The front door with the real CPU engine behind it, attacked as the issue's attacker did: raw-socket requests (no
client library normalises the path), browser-style cross-site POSTs, the engine's own routes through the relay, and
the engine's listeners as another local user sees them. Developer routes with the sleep-mode flags on are tested
against the models table's sleep entry (test_models.py, which calls `assert_engine_unreachable`)."""

from __future__ import annotations

import json

import pytest

from tests.support.door_attacks import (
    DEVELOPER_ROUTES,
    ENGINE_ROUTES,
    TWO_READINGS,
    assert_engine_unreachable,
)
from tests.support.raw_http import raw_request

from .conftest import ADMIN_KEY, INFERENCE_KEY, DaemonProcess

pytestmark = pytest.mark.engine


def inference() -> dict[str, str]:
    return {"Authorization": f"Bearer {INFERENCE_KEY}", "Content-Type": "application/json"}


def test_no_spelling_of_an_engine_route_reaches_the_engine(daemon: DaemonProcess):
    engine = daemon.status()["engine"]
    outcomes = assert_engine_unreachable(daemon.port, engine["pid"], engine["address"][len("unix:"):],
                                         ENGINE_ROUTES + DEVELOPER_ROUTES, INFERENCE_KEY)
    print(f"engine routes through the daemon, by status: {outcomes}")
    assert daemon.status()["state"] == "ready"


def test_raw_targets_with_two_readings_are_refused_with_the_reason(daemon: DaemonProcess):
    for target in TWO_READINGS:
        response = raw_request(daemon.port, "POST", target, inference(), b"{}")
        assert response.status == 400, (target, response.status)
        assert "request path" in response.text or "request target" in response.text


def test_cross_site_posts_do_not_act_and_the_admin_key_still_does(daemon: DaemonProcess):
    run_before = daemon.status()["engine"]["run_id"]
    for path in ("/restart", "/stop", "/start", "/plugins/bundled/activate"):
        for headers in ({"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
                        {"Origin": "https://evil.example", "Content-Type": "text/plain"},
                        {"Origin": "https://evil.example", "Content-Type": "application/json",
                         "Authorization": f"Bearer {ADMIN_KEY}"}):
            response = raw_request(daemon.port, "POST", path, headers, b"{}")
            assert response.status in (403, 415), (path, headers, response.status, response.text)
    status = daemon.status()
    assert status["state"] == "ready" and status["engine"]["run_id"] == run_before, "a refused call acted"
    # A wrong key in the dashboard's own form of the call: the key check answers, not the door.
    own = {"Origin": daemon.url, "Content-Type": "application/json", "Authorization": "Bearer wrong"}
    assert raw_request(daemon.port, "POST", "/restart", own, b"{}").status == 401


def test_requests_that_would_sample_are_refused_by_the_cpu_engine_and_greedy_ones_served(daemon: DaemonProcess):
    """vLLM's CPU build cannot run speculative decoding's sampler (README, The embedded default): a request with a
    temperature would get noise, and top_k stops the engine for everyone. The daemon refuses them with the reason
    from the launch decisions; the engine keeps serving."""
    run_before = daemon.status()["engine"]["run_id"]
    decisions = {d["name"]: d for d in daemon.status()["launch"]["decisions"]}
    assert decisions["sampling"]["value"] == "greedy only", decisions
    chat = {"model": "caovan-demo", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}
    # vLLM reads "0.7", true and NaN as temperatures that sample (the first two through pydantic's lax mode).
    samplings = ({"temperature": 0.7}, {"temperature": 1.0, "top_k": 20}, {"temperature": 0.8, "top_p": 0.9},
                 {"temperature": "0.7", "top_k": 5}, {"temperature": True})
    bodies = [json.dumps({**chat, **sampling}).encode() for sampling in samplings]
    bodies.append(json.dumps(chat)[:-1].encode() + b', "temperature": NaN, "top_k": 5}')
    for body in bodies:
        response = raw_request(daemon.port, "POST", "/v1/chat/completions", inference(), body)
        assert response.status == 400, (body, response.status, response.text[:300])
        assert "decodes greedily only" in response.json()["error"]["message"]
    served = raw_request(daemon.port, "POST", "/v1/chat/completions", inference(), json.dumps(chat).encode())
    assert served.status == 200 and served.json()["choices"][0]["message"]["content"].startswith("Sure here is")
    status = daemon.status()
    assert status["state"] == "ready" and status["engine"]["run_id"] == run_before
