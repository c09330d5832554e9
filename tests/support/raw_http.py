"""HTTP requests written byte by byte on a plain socket: the request target goes out exactly as given (every client
library normalises dot-segments and re-encodes paths, which hides what an attacker can send)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def raw_request(port: int, method: str, target: str | bytes, headers: dict[str, str | list[str]] | None = None,
                body: bytes = b"", host: str = "127.0.0.1", timeout_s: float = 30) -> RawResponse:
    """Send one request to host:port with the target byte for byte, read the whole response (Connection: close). A
    header given a list is sent once per item."""
    target_bytes = target if isinstance(target, bytes) else target.encode("latin-1")
    lines = [b"%s %s HTTP/1.1" % (method.encode(), target_bytes)]
    given = {name.lower(): value for name, value in (headers or {}).items()}
    given.setdefault("host", f"{host}:{port}")
    given["connection"] = "close"
    if body or method in ("POST", "PUT", "PATCH"):
        given["content-length"] = str(len(body))
    lines += [f"{name}: {value}".encode("latin-1") for name, values in given.items()
              for value in (values if isinstance(values, list) else [values])]
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        rest = _unchunk(rest)
    return RawResponse(int(status_line.split()[1]), parsed, rest)


def _unchunk(data: bytes) -> bytes:
    out = []
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append(data[:size])
        data = data[size + 2:]
    return b"".join(out)


def raw_exchange(port: int, head: bytes, body_parts: list[bytes]) -> bytes:
    """Write a request as raw bytes (the body may stop early when the daemon answers first); return the response."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(head)
            for part in body_parts:
                sock.sendall(part)
        except OSError:  # the daemon answered and closed while the body was still coming
            pass
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks)


def json_post_head(port: int, target: str) -> bytes:
    """A JSON POST's request line and headers, less its length or transfer encoding and the blank line."""
    return (f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\n").encode()


def oversized_answers(port: int, target: str, limit: int) -> list[bytes]:
    """The answers to a body over `limit` bytes sent two ways: a Content-Length of 1 GiB with nothing after it, and
    a chunked body (no length given) that runs past the limit."""
    head = json_post_head(port, target)
    piece = b" " * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * (limit // len(piece) + 2) + [b"0\r\n\r\n"]
    return [raw_exchange(port, head + b"Content-Length: 1073741824\r\n\r\n", []),
            raw_exchange(port, head + b"Transfer-Encoding: chunked\r\n\r\n", chunks)]
