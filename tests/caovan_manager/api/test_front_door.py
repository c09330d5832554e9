"""The front door over real sockets (uvicorn serving the daemon, engine stopped), requests written byte by byte:
targets with two readings, cross-site calls that would act, bad input, reflected text. The same attacks against a
daemon with a real engine behind it: tests/integration/daemon/test_front_door.py."""

from __future__ import annotations

import logging
import re
import socket

import pytest
from fastapi.testclient import TestClient

from caovan_manager.api.door import check_target, origin_matches
from caovan_manager.app import create_app
from caovan_manager.config import load_settings
from caovan_manager.engine.launch import EngineTarget
from caovan_manager.errors import ConfigError, NotRelayed, TargetRefused
from caovan_manager.proxy.allowlist import RELAYED, match
from tests.caovan_manager.api import LOCAL
from tests.support.door_attacks import ENGINE_ROUTES, TWO_READINGS
from tests.support.raw_http import json_post_head, oversized_answers, raw_exchange, raw_request
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
        # Each relayed route reaches the gate instead (a 503: the engine is stopped), but one model's card, which the
        # daemon answers itself (vLLM has none): "x" is no model here.
        for route in RELAYED:
            path = re.sub(r"\{[a-z_]+(:path)?\}", "x", route.template)
            response = raw_request(port, route.method, f"/v1/{path}", {"Content-Type": "application/json"},
                                   b'{"model": "x"}')
            expected = 404 if route.template.startswith("models/") else 503
            assert response.status == expected, (route, response.status, response.text)


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

    with TestClient(app("remote"), client=("203.0.113.7", 40000), base_url=LOCAL) as remote:
        refused = remote.post("/stop", json={})
        assert refused.status_code == 403 and "security.admin_keys" in refused.json()["detail"]
        assert remote.get("/status").status_code == 200  # reading stays open
    for address in ("::1", "127.0.0.5", "::ffff:127.0.0.1"):
        with TestClient(app(address), client=(address, 40000), base_url=LOCAL) as local:
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
            ("POST", "/plugins/nope-9f3a/activate", admin, b"{}"),  # well formed, not installed
            # a reason that would forge a log line ("engine ready") and colour the operator's terminal
            ("POST", "/restart", admin, b'{"reason": "x\\nINFO [caovan] engine ready (FORGED)\\u001b[31m"}'),
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
            for reflected in ("<svg", "<script", "svg onload", "\ufffd", "xxxxxxxxxx", "nope-9f3a", "FORGED",
                              str(tmp_path)):
                assert reflected not in response.text, (target, response.text[:300])


def test_odd_host_headers_change_nothing(tmp_path):
    """The Host-header confusion class (a Host carrying a path, a user part, or nothing) must neither bend routing
    nor reach the engine: each is refused, and the door reads the target alone."""
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        for host in ("x/", "x?", "x#", "evil.example/v1/../metrics", "127.0.0.1:1@evil.example", "", "[::1",
                     "a" * 300):
            status = raw_request(port, "GET", "/status", {"Host": host})
            assert status.status in (400, 403), (host, status.status)
            escape = raw_request(port, "GET", "/v1/../metrics", {"Host": host})
            assert escape.status == 400, (host, escape.status)
            relayed = raw_request(port, "GET", "/v1/server_info", {"Host": host})
            assert relayed.status in (400, 403, 404), (host, relayed.status)
            for response in (status, escape, relayed):
                assert "evil.example" not in response.text, host  # the Host is not echoed
        assert served.requests_counted("503") == 0


def test_a_page_that_rebinds_its_name_to_this_machine_can_neither_act_nor_read(tmp_path):
    """DNS rebinding: the page's domain now resolves to 127.0.0.1, so its calls come from loopback (keyless admin
    calls are allowed there) with an Origin that matches the Host it names. The Host is the attacker's name, and the
    door serves only IP addresses, localhost, this machine's name and configured names."""
    allowed = "gpu-box.lan"
    with served_daemon(tmp_path, security={"allowed_hosts": [allowed]}) as served:
        port = int(served.url.rsplit(":", 1)[1])
        machine = served.daemon.primary.machine
        before = (machine.state, machine.run)
        rebound = f"rebind.evil.example:{port}"
        page = {"Host": rebound, "Origin": f"http://{rebound}", "Sec-Fetch-Site": "same-origin",
                "Content-Type": "application/json"}
        for method, path in ACTIONS + [("GET", "/status"), ("GET", "/logs"), ("GET", "/doctor"),
                                       ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/")]:
            response = raw_request(port, method, path, page, b"{}" if method == "POST" else b"")
            assert response.status == 403, (method, path, response.status, response.text[:200])
            assert "security.allowed_hosts" in response.text and "evil" not in response.text
        assert (machine.state, machine.run) == before, "a refused call acted"
        assert served.requests_counted("503") == 0, "a refused /v1 call reached the relay's gate"
        two = raw_request(port, "GET", "/status", {"Host": [f"127.0.0.1:{port}", rebound]})
        assert two.status == 400 and "more than one Host" in two.text
        # Addresses and the names this daemon answers to are served, whatever the port and case.
        for host in (f"127.0.0.1:{port}", f"[::1]:{port}", "10.1.2.3", f"LOCALHOST:{port}", "localhost.",
                     f"{socket.gethostname()}:{port}", f"GPU-box.lan:{port}"):
            assert raw_request(port, "GET", "/status", {"Host": host}).status == 200, host
        own = {"Host": f"{allowed}:{port}", "Origin": f"http://{allowed}:{port}", "Content-Type": "application/json"}
        assert raw_request(port, "POST", "/stop", own, b'{"reason": "test"}').status in (202, 409)
    with served_daemon(tmp_path / "any", security={"allowed_hosts": ["*"]}) as served:
        port = int(served.url.rsplit(":", 1)[1])
        assert raw_request(port, "GET", "/status", {"Host": "rebind.evil.example"}).status == 200


def test_allowed_hosts_are_names_only():
    for bad in ("http://gpu-box.lan", "gpu-box.lan:8000", "gpu-box.lan/x", "", "a b"):
        with pytest.raises(ConfigError, match="allowed_hosts"):
            load_settings(security={"allowed_hosts": [bad]})


def test_an_oversized_body_to_the_daemons_own_routes_gets_a_413_before_any_key_is_checked(tmp_path):
    """FastAPI reads a body whole before a route's key check runs: the door bounds it, for callers without keys."""
    with served_daemon(tmp_path, security={"admin_keys": ["adm-door"]}) as served:
        port = int(served.url.rsplit(":", 1)[1])
        machine = served.daemon.primary.machine
        before = (machine.state, machine.run)
        for response in oversized_answers(port, "/restart", 1 << 20):
            assert response.startswith(b"HTTP/1.1 413 "), response[:200]
            assert b"1 MiB" in response
        # Under the bound, the call goes on to its key check as before.
        small = b'{"reason": "' + b"x" * 100 + b'"}'
        head = json_post_head(port, "/restart") + f"Content-Length: {len(small)}\r\n\r\n".encode()
        keyless = raw_exchange(port, head, [small])
        assert keyless.startswith(b"HTTP/1.1 401 "), keyless[:200]
        assert (machine.state, machine.run) == before


def test_no_page_can_frame_the_dashboard_or_the_daemons_answers(tmp_path):
    with served_daemon(tmp_path) as served:
        port = int(served.url.rsplit(":", 1)[1])
        for method, target in (("GET", "/"), ("GET", "/status"), ("GET", "/docs"), ("GET", "/x/../y"),
                               ("GET", "/nothing-here"), ("POST", "/restart")):
            response = raw_request(port, method, target)
            assert response.headers.get("x-frame-options") == "DENY", (target, response.headers)
            assert response.headers.get("content-security-policy") == "frame-ancestors 'none'", target


def test_a_header_sent_twice_or_an_unknown_method_is_refused_before_any_part_reads_it(tmp_path):
    """The relay's key check read the last Authorization and FastAPI the first: a wrong key beside a right one got
    through one of them. Each header that decides something must come once."""
    with served_daemon(tmp_path, security={"inference_keys": ["inf-door"], "admin_keys": ["adm-door"]}) as served:
        port = int(served.url.rsplit(":", 1)[1])
        machine = served.daemon.primary.machine
        before = (machine.state, machine.run)
        keys = {"Authorization": ["Bearer wrong", "Bearer inf-door"], "Content-Type": "application/json"}
        assert raw_request(port, "POST", "/v1/chat/completions", keys, b"{}").status == 400
        admin = {"Authorization": ["Bearer adm-door", "Bearer wrong"], "Content-Type": "application/json"}
        assert raw_request(port, "POST", "/restart", admin, b"{}").status == 400
        types = {"Authorization": "Bearer adm-door", "Content-Type": ["text/plain", "application/json"]}
        response = raw_request(port, "POST", "/stop", types, b"{}")
        assert response.status == 400 and "more than one Content-Type header" in response.text
        for method in ("TRACE", "CONNECT", "PROPFIND"):
            response = raw_request(port, method, "/", {})
            assert response.status == 405 and "GET" in response.text, (method, response.status)
        assert (machine.state, machine.run) == before


def test_the_listening_name_and_localhost_names_are_served_and_a_refused_name_is_logged_once(tmp_path, caplog):
    with served_daemon(tmp_path, host="box-7.internal") as served:
        port = int(served.url.rsplit(":", 1)[1])
        for host in (f"box-7.internal:{port}", f"dash.localhost:{port}"):
            assert raw_request(port, "GET", "/status", {"Host": host}).status == 200, host
        with caplog.at_level(logging.WARNING, logger="caovan.door"):
            for host in ("rebind.evil.example", "rebind.evil.example:1", "REBIND.evil.example", "bad\xe9name.example"):
                assert raw_request(port, "GET", "/status", {"Host": host}).status in (400, 403), host
        told = [r.getMessage() for r in caplog.records if r.name == "caovan.door"]
        assert len([m for m in told if "rebind.evil.example" in m]) == 1, told  # once, whatever port or case
        assert any("no plain name" in m for m in told) and not any("bad" in m for m in told), told
        assert all("security.allowed_hosts" in m for m in told), told
