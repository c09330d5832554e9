"""The daemon's front door: an ASGI middleware that sees every request before any routing.

Three refusals happen here, because each must hold for every route, the relay's included:

- Request targets that mean something else to the next parser. aiohttp (the relay's client), Starlette's static files
  and vLLM's own router each normalise paths their own way, so a target with dot-segments (`..`, `.`, encoded or
  not), backslashes, encoded slashes, percent signs or NUL bytes, or empty segments, is refused as sent: what passes
  here has one meaning for every parser behind it, and the relay forwards it byte for byte.
- Cross-site requests that act. A browser sends a form POST, or a `fetch` with a simple content type, to any
  address without asking the daemon first, so a page open in the operator's browser could restart the engine on
  127.0.0.1. State-changing calls outside /v1 must therefore be requests no browser sends cross-site without a
  CORS preflight (which the daemon never grants): a JSON body or an Authorization header, and no foreign Origin.
  /v1 stays as open to browsers as vLLM's own API (inference keys guard it where they are set).
- Host names the daemon does not answer to. A page on a domain whose DNS answer its owner switches to 127.0.0.1
  (DNS rebinding) is same-origin with the daemon as far as the browser knows: its calls carry a matching Origin and
  come from loopback, where keyless admin calls are allowed, and it may read /status, /logs and the API. Such calls
  still name the attacker's domain in Host, so only IP addresses, localhost (and names under .localhost), this
  machine's name, the name it listens on and the names the operator configured (security.allowed_hosts, the hosts
  of security.trusted_origins) are served.

It also refuses what some part behind it would read differently from another: a method the daemon has no use for,
a deciding header (Host, Authorization, Content-Type, Origin, Sec-Fetch-Site) sent twice; and it bounds the bodies
of the daemon's own calls, which FastAPI reads whole before any key is checked.

Answers are fixed descriptions: nothing of the request (its path, its headers) is echoed back. The daemon's own
answers (the dashboard's included) forbid framing, so no page can show them in a frame and trick the operator's
clicks.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from caovan_manager.errors import TargetRefused

logger = logging.getLogger("caovan.door")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPENAI_PREFIX = "/v1/"
# The daemon's own calls take a few hundred bytes of JSON; FastAPI reads a body whole before any key is checked, so
# without a bound an unauthenticated caller could make it hold gigabytes. (/v1 has its own: proxy.max_body_mib.)
OWN_BODY_LIMIT = 1 << 20
# Percent-encoded '.', '/', '\' and '%' (so nothing decodes to one later), and any control byte.
_ENCODED = re.compile(rb"%(2e|2f|5c|25|[01][0-9a-f]|7f)", re.IGNORECASE)
_CONTROL = re.compile(rb"[\x00-\x1f\x7f\\]")
_DEFAULT_PORTS = {"http": 80, "https": 443}
NO_FRAMING = [(b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'")]


@dataclass(frozen=True)
class Refusal:
    """A request refused at the door: its HTTP status and the fixed words saying what to do."""

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


ANY_HOST = "*"
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?")  # what the log repeats of a refused Host
MAX_LOGGED_HOSTS = 20  # names told once each; beyond, refusals are not logged (a flood of names cannot fill the log)


def _host_name(host_header: str) -> str | None:
    """The name or address in a Host header, in lower case without port, brackets or a final dot; None if unreadable."""
    try:
        name = urlsplit(f"http://{host_header}").hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


@lru_cache(maxsize=1)
def machine_names() -> frozenset[str]:
    """This machine's own names, which a browser on it or on its network may use for the daemon."""
    name = socket.gethostname().lower().rstrip(".")
    return frozenset({"localhost", name, name.split(".")[0]} - {""})


def host_allowed(host_header: str, allowed: Iterable[str]) -> bool:
    """May a request naming this Host be served? IP addresses always may (DNS rebinding needs a domain name), and so
    may names under .localhost (which resolve to this machine and never through DNS, RFC 6761); other names only if
    listed in `allowed` (lower case; "*" accepts any)."""
    allowed = set(allowed)
    if ANY_HOST in allowed:
        return True
    name = _host_name(host_header)
    if name is None:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in allowed or name.endswith(".localhost")


# Headers that the door, the key checks and FastAPI each read: with two copies, one part could read the first and
# another the last (a wrong key beside a right one, a form type beside JSON).
SINGLE_HEADERS = (b"host", b"authorization", b"content-type", b"origin", b"sec-fetch-site")
KNOWN_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})


def header_refusal(method: str, headers: list[tuple[bytes, bytes]]) -> Refusal | None:
    """Why a request must be refused for its method or for a header sent twice, or None."""
    if method not in KNOWN_METHODS:
        return Refusal(405, f"the daemon answers {', '.join(sorted(KNOWN_METHODS))} only")
    names = [key for key, _ in headers]
    for name in SINGLE_HEADERS:
        if names.count(name) > 1:
            return Refusal(400, f"the request has more than one {name.decode().title()} header; send one")
    return None


def host_refusal(headers: list[tuple[bytes, bytes]], allowed: Iterable[str]) -> Refusal | None:
    """Why a request must be refused for the name it was sent to, or None. No Host at all (HTTP/1.0 from a script)
    is no browser's request and passes."""
    hosts = [value.decode("latin-1") for key, value in headers if key == b"host"]
    if hosts and not host_allowed(hosts[0], allowed):
        return Refusal(403, "the Host header names neither an IP address nor a name this daemon answers to, as a "
                            "web page reaching it through DNS rebinding would; if you reach the daemon by this name, "
                            "add it to security.allowed_hosts")
    return None


@lru_cache(maxsize=8)
def trusted_hosts(trusted_origins: tuple[str, ...], allowed_hosts: tuple[str, ...]) -> frozenset[str]:
    """The names the daemon answers to: this machine's, the configured ones, and the trusted origins' hosts (cached:
    every request asks, and the settings rarely change)."""
    names = {name.lower().rstrip(".") for name in allowed_hosts}
    names |= {host.rstrip(".") for origin in trusted_origins if (host := urlsplit(origin).hostname)}
    return frozenset(names) | machine_names()


class FrontDoor:
    """ASGI middleware in front of the whole daemon (routes, relay, dashboard)."""

    def __init__(self, app: ASGIApp, trusted_origins: Callable[[], Iterable[str]],
                 allowed_hosts: Callable[[], Iterable[str]]) -> None:
        self.app = app
        self.trusted_origins = trusted_origins
        self.allowed_hosts = allowed_hosts
        self.refused_hosts: set[str] = set()

    def _log_refused_host(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Say once per name which Host was refused, so an operator who reaches the daemon by a name it does not
        know sees the setting to change; names that are not plain host names are not repeated into the log."""
        name = next((_host_name(value.decode("latin-1")) for key, value in headers if key == b"host"), None)
        shown = name if name and HOST_NAME.fullmatch(name) else "a Host that is no plain name"
        if shown in self.refused_hosts or len(self.refused_hosts) >= MAX_LOGGED_HOSTS:
            return
        self.refused_hosts.add(shown)
        logger.warning("refused requests for Host %s: not an IP address or a name this daemon answers to (DNS "
                       "rebinding sends such names); if clients reach the daemon by it, add it to "
                       "security.allowed_hosts", shown)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
        openai = raw_path.startswith(OPENAI_PREFIX.encode())
        if scope["type"] == "http" and not openai:  # the relay's streams skip the wrapper: nothing there to click
            send = _unframeable(send)
        try:
            check_target(raw_path)
        except TargetRefused as exc:
            await _refuse(scope, send, exc.status, str(exc), openai, "invalid_request_target")
            return
        names = trusted_hosts(tuple(self.trusted_origins()), tuple(self.allowed_hosts()))
        refusal = header_refusal(scope.get("method", "GET"), scope["headers"])
        if refusal is None:
            refusal = host_refusal(scope["headers"], names)
            if refusal is not None:
                self._log_refused_host(scope["headers"])
        if refusal is not None:
            await _refuse(scope, send, refusal.status, refusal.message, openai, "request_refused")
            return
        if scope["type"] == "http" and not openai:
            headers = dict(scope["headers"])
            refusal = cross_site_refusal(scope["method"], headers, self.trusted_origins())
            if refusal is not None:
                await _refuse(scope, send, refusal.status, refusal.message, False, "cross_site_refused")
                return
            body = await _bounded_body(headers, receive, OWN_BODY_LIMIT)
            if body is None:
                await _refuse(scope, send, 413, f"the request body is larger than the daemon's own calls take "
                                                f"({OWN_BODY_LIMIT >> 20} MiB); send the JSON the API docs describe",
                              False, "body_too_large")
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)


async def _bounded_body(headers: dict[bytes, bytes], receive: Receive, limit: int) -> list[Message] | None:
    """The request's body messages, read up to `limit` bytes; None if it declares or sends more."""
    declared = headers.get(b"content-length", b"")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):  # (int() refuses 4,300 digits)
        return None
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":  # the client left: the app sees that as it would have
            return messages
        size += len(message.get("body", b""))
        if size > limit:
            return None
        if not message.get("more_body"):
            return messages


def _unframeable(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *NO_FRAMING]
        await send(message)
    return sending


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives the messages already read, then the client's own (a disconnect, for streams)."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()
    return replayed


async def _refuse(scope: Scope, send: Send, status: int, message: str, openai: bool, kind: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    # /v1 clients read OpenAI's error shape, the daemon's own clients FastAPI's.
    document = ({"error": {"message": message, "type": kind, "param": None, "code": status}} if openai
                else {"detail": message})
    body = json.dumps(document).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 413:  # the rest of the body is not read: end the connection instead of reading on
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
