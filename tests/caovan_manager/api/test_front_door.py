"""The front door over real sockets (uvicorn serving the daemon, engine stopped), requests written byte by byte:
targets with two readings, cross-site calls that would act, bad input, reflected text. The same attacks against a
daemon with a real engine behind it: tests/integration/daemon/test_front_door.py."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from caovan_manager.api.door import check_target, origin_matches
from caovan_manager.app import create_app
from caovan_manager.config import load_settings
from caovan_manager.engine.launch import EngineTarget
from caovan_manager.errors import NotRelayed, TargetRefused
from caovan_manager.proxy.allowlist import RELAYED, match
from tests.support.door_attacks import ENGINE_ROUTES, TWO_READINGS
from tests.support.raw_http import raw_request
from tests.support.served import served_daemon

ACTIONS = [("POST", "/restart"), ("POST", "/stop"), ("POST", "/start"), ("POST", "/plugins/bundled/activate"),
           ("POST", "/models/caovan-demo/canary"), ("POST", "/draft-vocab")]


def test_check_target_accepts_plain_paths_and_refuses_each_form_with_two_readings():
    for plain in (b"/", b"/v1/models", b"/v1/models/Qwen/Qwen3.6-27B-AWQ", b"/v1/chat/completions", b"/docs",
                  b"/v1/models/", b"/models/caovan-demo/load", b"/v1/models/a%20b"):
        check_target(plain)
    for target in TWO_READINGS:
        with pytest.raises(TargetRefused):
            check_target(target.encode())


def test_origins_match_the_host_they_were_sent_to_with_default_ports_normalised():
    assert origin_matches("http://127.0.0.1:8000", "127.0.0.1:8000", [])
    assert origin_matches("https://caovan.example.com", "caovan.example.com", [])
    assert origin_matches("http://localhost", "localhost:80", [])
    assert origin_matches("https://dash.example", "127.0.0.1:8000", ["https://dash.example/"])
    for foreign, host in (("https://evil.example", "127.0.0.1:8000"), ("http://127.0.0.1:9000", "127.0.0.1:8000"),
                          ("null", "127.0.0.1:8000"), ("http://127.0.0.1:8000.evil.example", "127.0.0.1:8000"),
                          ("file://", "127.0.0.1:8000"), ("http://127.0.0.1:8000", None)):
        assert not origin_matches(foreign, host, []), (foreign, host)


def test_the_allowlist_matches_methods_and_whole_paths_only():
    assert match("POST", "chat/completions").label == "/v1/chat/completions"
    assert match("GET", "models/Qwen/Qwen3.6-27B").label == "/v1/models/{model}"
    assert match("HEAD", "models").label == "/v1/models"
    for method, path, status in (("GET", "chat/completions", 405), ("POST", "chat/completions/render", 404),
                                 ("POST", "chat/completionsX", 404), ("GET", "server_info", 404),
                                 ("POST", "load_lora_adapter", 404), ("GET", "", 404)):
        with pytest.raises(NotRelayed) as refused:
            match(method, path)
        assert refused.value.status == status, (method, path)


def test_raw_targets_with_two_readings_are_refused_before_any_routing(tmp_path):
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        # The gate is closed (engine stopped): a request that got past the door would wait in the queue or get a
        # 503; a 400 naming the reason comes only from the door.
        for target in TWO_READINGS:
            for method in ("GET", "POST"):
                response = raw_request(port, method, target, {"Content-Type": "application/json"}, b"{}")
                assert response.status == 400, (method, target, response.status, response.text)
                body = response.json()
                message = body["error"]["message"] if "error" in body else body["detail"]
                assert "request path" in message or "request target" in message, (target, message)
                assert "etc/passwd" not in response.text and "Injected" not in response.text
        assert served.requests_counted("503") == 0


def test_engine_routes_outside_the_allowlist_are_answered_by_the_daemon_and_never_queued(tmp_path):
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        for route in ENGINE_ROUTES:
            for method in ("GET", "POST"):
                response = raw_request(port, method, f"/v1/{route}", {"Content-Type": "application/json"}, b"{}")
                assert response.status in (404, 405), (method, route, response.status, response.text)
                assert response.json()["error"]["type"] in ("NotFoundError", "MethodNotAllowed")
        # Each relayed route reaches the gate instead (a 503: the engine is stopped).
        for route in RELAYED:
            path = re.sub(r"\{[a-z_]+(:path)?\}", "x", route.template)
            response = raw_request(port, route.method, f"/v1/{path}", {"Content-Type": "application/json"},
                                   b'{"model": "x"}')
            assert response.status == 503, (route, response.status, response.text)


def test_a_cross_site_form_or_simple_fetch_cannot_act_on_a_daemon_without_keys(tmp_path):
    """The default configuration (no keys): what any web page open in the operator's browser can send."""
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        machine = served.daemon.primary.machine
        before = (machine.state, machine.run)
        browser_forms = [
            # a <form method=post> from another site: urlencoded, empty body, the page's Origin
            {"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded",
             "Sec-Fetch-Site": "cross-site"},
            # fetch(..., {method: "POST", mode: "no-cors", body: "{}"}): text/plain, no preflight
            {"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8",
             "Sec-Fetch-Site": "cross-site"},
            {"Origin": "null", "Content-Type": "multipart/form-data; boundary=x"},  # a sandboxed frame
            # JSON is sent only after a preflight the daemon never grants; and the Origin is foreign anyway
            {"Origin": "http://127.0.0.1.evil.example", "Content-Type": "application/json"},
            {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},  # a sibling port's page, no Origin
            {},  # curl -X POST without a body: no form a page could not send either
        ]
        for method, path in ACTIONS:
            for headers in browser_forms:
                response = raw_request(port, method, path, headers, b"")
                assert response.status in (403, 415), (path, headers, response.status, response.text)
                assert "evil" not in response.text
        assert (machine.state, machine.run) == before, "a refused call acted"
        # The same call as the dashboard makes it (same origin, JSON) and as curl with JSON is taken.
        own = {"Origin": served.url, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}
        assert raw_request(port, "POST", "/stop", own, b'{"reason": "test"}').status in (202, 409)
        assert raw_request(port, "POST", "/stop", {"Content-Type": "application/json"}, b"{}").status in (202, 409)


def test_without_admin_keys_admin_calls_come_from_this_machine_only(tmp_path):
    def app(folder: str):
        return create_app(load_settings(state_dir=str(tmp_path / folder)), EngineTarget("/models/none", []),
                          autostart=False)

    with TestClient(app("remote"), client=("203.0.113.7", 40000)) as remote:
        refused = remote.post("/stop", json={})
        assert refused.status_code == 403 and "security.admin_keys" in refused.json()["detail"]
        assert remote.get("/status").status_code == 200  # reading stays open
    for address in ("::1", "127.0.0.5", "::ffff:127.0.0.1"):
        with TestClient(app(address), client=(address, 40000)) as local:
            assert local.post("/stop", json={}).status_code in (202, 409), address


def test_bad_input_gets_a_4xx_with_a_message_and_no_reflected_text(tmp_path):
    settings = {"security": {"admin_keys": ["adm-door"]}, "models": {"chat": {}, "coder": {}}}
    with served_daemon(tmp_path, **settings) as served:
        port = int(served.url.rsplit(":", 1)[1])
        admin = {"Authorization": "Bearer adm-door", "Content-Type": "application/json"}
        deep = b"[" * 100_000 + b"]" * 100_000
        cases = [
            ("POST", "/v1/chat/completions", {"Content-Type": "application/json"}, b'{"model": ' + deep + b"}"),
            ("POST", "/v1/chat/completions", {"Content-Type": "application/json"}, b'{"model": "\xff\xfe"}'),
            ("POST", "/v1/completions", {"Content-Type": "application/json"}, b"\xff" * 64),
            ("POST", "/restart", admin, deep),
            ("POST", "/restart", admin, b"\xc3\x28"),
            ("POST", "/restart", admin, b'{"reason": 1e999999}'),
            ("POST", "/restart", admin, b'{"reason": "' + b"x" * 100_000 + b'"}'),
            ("GET", "/logs?tail=99999999999999999999999999", {}, b""),
            ("GET", "/logs?tail=-1", {}, b""),
            ("GET", "/logs?tail=%ff%fe", {}, b""),
            ("GET", "/metrics/engine?model=%3Csvg%20onload%3Dalert(1)%3E", {}, b""),
            ("POST", "/models/%3Csvg%20onload%3Dalert(1)%3E/unload", admin, b"{}"),
            ("POST", "/models/%3Csvg%20onload%3Dalert(1)%3E/unload", {"Content-Type": "application/json"}, b"{}"),
            ("POST", "/plugins/%3Cscript%3E/activate", admin, b"{}"),
            ("POST", "/draft-vocab", admin, deep),
            ("POST", "/draft-vocab", admin, b'{"setting": "\xff"}'),
            ("POST", "/draft-vocab", admin, b'{"setting": "<svg onload=alert(1)>"}'),
            ("POST", "/draft-vocab", admin, b'{"setting": {"<svg onload=alert(1)>": 1}}'),
            ("POST", "/draft-vocab", admin, b'{"setting": {"size": "<script>"}}'),
            ("POST", "/draft-vocab", admin, b'{"setting": ["<script>"]}'),
            ("POST", "/draft-vocab", admin, b'{"setting": 1e999999}'),
            ("POST", "/v1/chat/completions", {"Content-Type": "application/json"},
             b'{"model": "<svg onload=alert(1)>"}'),
        ]
        for method, target, headers, body in cases:
            response = raw_request(port, method, target, headers, body)
            assert 400 <= response.status < 500, (target, body[:40], response.status, response.text[:300])
            assert response.text.strip(), (target, "an empty error body")
            for reflected in ("<svg", "<script", "svg onload", "\ufffd", "xxxxxxxxxx"):
                assert reflected not in response.text, (target, response.text[:300])


def test_odd_host_headers_change_nothing(tmp_path):
    """The Host-header confusion class (a Host carrying a path, a user part, or nothing) must neither bend routing
    nor reach the engine: what passes is routed on the request target alone."""
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        for host in ("x/", "x?", "x#", "evil.example/v1/../metrics", "127.0.0.1:1@evil.example", "", "[::1",
                     "a" * 300):
            status = raw_request(port, "GET", "/status", {"Host": host})
            assert status.status in (200, 400), (host, status.status)
            escape = raw_request(port, "GET", "/v1/../metrics", {"Host": host})
            assert escape.status == 400, (host, escape.status)
            relayed = raw_request(port, "GET", "/v1/server_info", {"Host": host})
            assert relayed.status in (400, 404), (host, relayed.status)
            for response in (status, escape, relayed):
                assert "evil.example" not in response.text, host  # the Host is not echoed
        assert served.requests_counted("503") == 0
