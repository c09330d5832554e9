"""The attacks on the daemon's front door that more than one test sends: request targets with two readings, the
engine's own routes, and the check that nothing but the daemon reaches an engine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from tests.support.raw_http import raw_request

# Every form of "a path another parser reads differently" the door refuses; each is sent raw.
TWO_READINGS = [
    "/v1/../metrics", "/v1/../version", "/v1/../openapi.json", "/v1/../tokenize", "/v1/../invocations",
    "/v1/./models", "/v1/models/..", "/v1/%2e%2e/metrics", "/v1/%2E%2E/metrics", "/v1/%2E./version", "/v1/.%2e/health",
    "/v1/..%2fmetrics", "/v1/..%2Fmetrics", "/v1%2f..%2fmetrics", "/v1/%252e%252e/metrics", "/v1\\..\\metrics",
    "/v1/..%5cmetrics", "/v1//models", "//v1/models", "/v1/models%00", "/v1/models%0d%0aX-Injected:%201",
    "/status/../v1/models", "/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/web/..%2f..%2fpyproject.toml",
]
ENGINE_ROUTES = ["metrics", "version", "health", "ping", "load", "docs", "openapi.json", "invocations", "pooling",
                 "classify", "scale_elastic_ep", "tokenize", "detokenize", "server_info", "collective_rpc", "pause",
                 "resume", "is_paused", "sleep", "wake_up", "is_sleeping", "reset_prefix_cache", "start_profile",
                 "load_lora_adapter", "unload_lora_adapter", "chat/completions/render", "completions/render",
                 "chat/completions/batch", "update_weights"]
NOBODY = 65534
# The routes vLLM serves beside the OpenAI API, reached through every spelling an attacker would try.
ESCAPES = ["/v1/../{route}", "/v1/%2e%2e/{route}", "/v1/%2E./{route}", "/v1/..%2f{route}", "/v1\\..\\{route}",
           "/v1/%252e%252e/{route}", "/v1//../{route}", "/v1/{route}"]
DEVELOPER_ROUTES = ["server_info", "collective_rpc", "pause", "resume", "sleep", "wake_up", "reset_prefix_cache",
                    "is_sleeping", "is_paused", "reset_mm_cache", "start_profile", "update_weights"]


def assert_engine_unreachable(port: int, engine_pid: int, socket_path: str, routes: list[str],
                              inference_key: str) -> dict[str, int]:
    """No spelling of any of `routes` reaches the engine through the daemon (port), the engine's API server listens
    on no TCP port, no TCP listener of its process group answers HTTP, vLLM's own IPC sockets lie in the private
    folder beside the engine's socket, and another local user cannot open its
    socket. Returns counts per outcome, for the closing note."""
    outcomes: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {inference_key}", "Content-Type": "application/json"}
    for route in routes:
        for escape in ESCAPES:
            target = escape.format(route=route)
            for method in ("GET", "POST"):
                response = raw_request(port, method, target, headers, b'{"method": "get_model"}')
                assert 400 <= response.status < 500, (method, target, response.status, response.text[:200])
                assert '"vllm_config"' not in response.text and "vllm:" not in response.text, target
                outcomes[str(response.status)] = outcomes.get(str(response.status), 0) + 1
    for route in DEVELOPER_ROUTES:  # the daemon's own namespace has none of them either
        for method in ("GET", "POST"):
            assert 400 <= raw_request(port, method, f"/{route}", headers, b"{}").status < 500, route
    api_server = psutil.Process(engine_pid)
    assert not [c for c in api_server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN], \
        "the engine's API server listens on a TCP port"
    for member in [api_server, *api_server.children(recursive=True)]:
        for conn in member.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                assert not answers_http(conn.laddr.ip, conn.laddr.port), (member.name(), conn.laddr)
    folder = Path(socket_path).parent
    for member in [api_server, *api_server.children(recursive=True)]:  # vLLM's own IPC sockets: in the folder too
        for conn in member.net_connections(kind="unix"):
            bound = conn.laddr if isinstance(conn.laddr, str) else ""
            assert not bound.startswith("/") or Path(bound).parent == folder, (member.name(), bound)
    assert (folder.stat().st_mode & 0o777) == 0o700 and folder.stat().st_uid == os.getuid(), oct(folder.stat().st_mode)
    # Another local user (nobody) tries to open the engine's socket and to send it a developer call.
    attempt = subprocess.run(
        [sys.executable, "-c", f"import os, socket; os.setgid({NOBODY}); os.setuid({NOBODY}); "
                               f"s = socket.socket(socket.AF_UNIX); s.connect({socket_path!r}); "
                               f"s.sendall(b'GET /server_info HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100))"],
        capture_output=True, text=True, timeout=60)
    assert attempt.returncode != 0 and "PermissionError" in attempt.stderr, (attempt.stdout, attempt.stderr[-500:])
    return outcomes


def answers_http(host: str, port: int) -> bool:
    """Does a TCP listener answer an HTTP request with an HTTP status line (vLLM's workers keep torch.distributed
    and ZeroMQ listeners on loopback; those speak no HTTP)?"""
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.settimeout(2)
            sock.sendall(b"GET /server_info HTTP/1.0\r\nHost: x\r\n\r\n")
            return sock.recv(16).startswith(b"HTTP/")
    except OSError:
        return False
