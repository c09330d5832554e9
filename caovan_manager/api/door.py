"""The daemon's front door: an ASGI middleware that sees every request before any routing.

Two refusals happen here, because both must hold for every route, the relay's included:

- Request targets that mean something else to the next parser. aiohttp (the relay's client), Starlette's static files
  and vLLM's own router each normalise paths their own way, so a target with dot-segments (`..`, `.`, encoded or
  not), backslashes, encoded slashes, percent signs or NUL bytes, or empty segments, is refused as sent: what passes
  here has one meaning for every parser behind it, and the relay forwards it byte for byte.
- Cross-site requests that act. A browser sends a form POST, or a `fetch` with a simple content type, to any
  address without asking the daemon first, so a page open in the operator's browser could restart the engine on
  127.0.0.1. State-changing calls outside /v1 must therefore be requests no browser sends cross-site without a
  CORS preflight (which the daemon never grants): a JSON body or an Authorization header, and no foreign Origin.
  /v1 stays as open to browsers as vLLM's own API (inference keys guard it where they are set).

Answers are fixed descriptions: nothing of the request (its path, its headers) is echoed back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from caovan_manager.errors import TargetRefused

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPENAI_PREFIX = "/v1/"
# Percent-encoded '.', '/', '\' and '%' (so nothing decodes to one later), and any control byte.
_ENCODED = re.compile(rb"%(2e|2f|5c|25|[01][0-9a-f]|7f)", re.IGNORECASE)
_CONTROL = re.compile(rb"[\x00-\x1f\x7f\\]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Refusal:
    """A state-changing request refused at the door: its HTTP status and the fixed words saying what to do."""

    status: int
    message: str


def check_target(raw_path: bytes) -> None:
    """Refuse a request target (path only, as sent) that any parser behind the daemon could read differently."""
    if not raw_path.startswith(b"/"):
        raise TargetRefused("the request target must be an absolute path starting with '/'")
    if _CONTROL.search(raw_path):
        raise TargetRefused("the request path contains a backslash or a control character")
    if _ENCODED.search(raw_path):
        raise TargetRefused("the request path percent-encodes '.', '/', '\\', '%' or a control character; "
                            "send those characters plainly (or not at all)")
    segments = raw_path[1:].split(b"/")
    if any(segment in (b".", b"..") for segment in segments):
        raise TargetRefused("the request path contains a '.' or '..' segment; send the path it means")
    if any(not segment for segment in segments[:-1]):
        raise TargetRefused("the request path contains an empty segment ('//')")


def _authority(value: str, scheme: str) -> str | None:
    """host[:port] in lower case with the scheme's default port left out, or None if it cannot be read."""
    try:
        parts = urlsplit(f"{scheme}://{value}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"


def origin_matches(origin: str, host_header: str | None, trusted: Iterable[str]) -> bool:
    """Is `origin` (an Origin header) the daemon's own address as the client named it (its Host header), or one of
    the configured trusted origins (a dashboard behind a reverse proxy that rewrites Host)?"""
    if origin.rstrip("/") in {item.rstrip("/") for item in trusted}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc or not host_header:
        return False
    own = _authority(parts.netloc, parts.scheme)
    return own is not None and own == _authority(host_header, parts.scheme)


def cross_site_refusal(method: str, headers: dict[bytes, bytes], trusted: Iterable[str]) -> Refusal | None:
    """Why a state-changing request must be refused as possibly cross-site, or None if it may proceed."""
    if method in SAFE_METHODS:
        return None
    fetch_site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
    origin = headers.get(b"origin")
    if origin is not None:
        if not origin_matches(origin.decode("latin-1"), (headers.get(b"host") or b"").decode("latin-1"), trusted):
            return Refusal(403, "cross-site request refused: the Origin is not this daemon's address "
                                "(security.trusted_origins lists other origins allowed to call it)")
    elif fetch_site and fetch_site not in ("same-origin", "none"):
        return Refusal(403, "cross-site request refused: the browser says it comes from another site "
                            "(Sec-Fetch-Site)")
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if content_type != b"application/json" and b"authorization" not in headers:
        return Refusal(415, "this call changes the daemon's state, so it must be a request no web page can send "
                            "from another site: send a JSON body with `Content-Type: application/json` (`{}` will "
                            "do) or an `Authorization: Bearer <admin key>` header")
    return None


class FrontDoor:
    """ASGI middleware in front of the whole daemon (routes, relay, dashboard)."""

    def __init__(self, app: ASGIApp, trusted_origins: Callable[[], Iterable[str]]) -> None:
        self.app = app
        self.trusted_origins = trusted_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
        openai = raw_path.startswith(OPENAI_PREFIX.encode())
        try:
            check_target(raw_path)
        except TargetRefused as exc:
            await _refuse(scope, send, exc.status, str(exc), openai, "invalid_request_target")
            return
        if scope["type"] == "http" and not openai:
            headers = dict(scope["headers"])
            refusal = cross_site_refusal(scope["method"], headers, self.trusted_origins())
            if refusal is not None:
                await _refuse(scope, send, refusal.status, refusal.message, False, "cross_site_refused")
                return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, status: int, message: str, openai: bool, kind: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    # /v1 clients read OpenAI's error shape, the daemon's own clients FastAPI's.
    document = ({"error": {"message": message, "type": kind, "param": None, "code": status}} if openai
                else {"detail": message})
    body = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
