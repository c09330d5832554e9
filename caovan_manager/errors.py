"""Every error the daemon raises on purpose, in one tree; each message says what happened and what to do next.

    CaovanError
    ├── ConfigError             a configuration the daemon cannot start with (config)
    ├── PortInUse               a listener holds a port the daemon needs (engine.process)
    ├── SocketFolderError       no private folder for the engines' sockets (proxy.upstream)
    ├── ProbeError              the engine answered a readiness or benchmark call wrongly (engine.probe)
    ├── PluginStoreError        a plugin version cannot be stored or found (plugins.store)
    │   └── UnknownVersion
    ├── IllegalTransition       a decision tried a state change the transition table does not allow (a bug)
    └── RequestRefused          a client's request the daemon answers itself, with an HTTP status
        ├── TargetRefused       a request target with two readings (api.door), 400
        ├── NotRelayed          a path or method below /v1 that is not relayed (proxy.allowlist), 404 / 405
        ├── UnknownModel        a model that is not configured, 404
        ├── BadRouteRequest     a /v1 body the daemon cannot read the model from (models.router), 400 / 404
        ├── Unavailable         no engine can serve the request now (proxy.gate), 503 with Retry-After
        └── NothingLearnt       DraftVocab's learnt hot vocabulary asked for before enough was counted, 409

Where a builtin base was part of a class's meaning (a ValueError for bad input, a LookupError for a missing name)
it is kept, so `except ValueError` around a parser still works.
"""

from __future__ import annotations

from typing import Any


class CaovanError(Exception):
    """The root: anything the daemon raises on purpose."""


class ConfigError(CaovanError):
    """A configuration the daemon cannot start with; the message says what, where and what to do."""


class PortInUse(CaovanError, RuntimeError):
    """A listener holds the port; `holder` names it, `what` and `fix` say whose port it is and what to change."""

    def __init__(self, host: str, port: int, holder: str, what: str, fix: str) -> None:
        super().__init__(f"{what} {host}:{port} is already in use by {holder}; stop that process or {fix}")
        self.host, self.port, self.holder = host, port, holder


class SocketFolderError(CaovanError, RuntimeError):
    """No private folder for the engines' sockets could be made; the message says where and what to set."""


class ProbeError(CaovanError, RuntimeError):
    """The engine answered a readiness or benchmark call with something unusable; the message says what."""


class PluginStoreError(CaovanError):
    """Something a user asked of the store that cannot be done; the message says what to do."""


class UnknownVersion(PluginStoreError):
    """No plugin version of that name is in the store."""


class IllegalTransition(CaovanError, RuntimeError):
    """A decision tried to move an engine along an edge the transition table does not have: a bug in the daemon."""

    def __init__(self, before: str, after: str) -> None:
        super().__init__(f"illegal state change {before} -> {after} (caovan_manager.supervisor.state.TRANSITIONS); "
                         f"this is a bug in the daemon: please report it with the log")
        self.before, self.after = before, after


class RequestRefused(CaovanError):
    """A client's request that the daemon answers itself with an HTTP status; the message is fixed text, never
    anything the request carried."""

    status: int = 400


class TargetRefused(RequestRefused, ValueError):
    """A request target the daemon does not route; the message says why, in fixed words."""


class NotRelayed(RequestRefused, LookupError):
    """A path below /v1/ (or a method on it) that the daemon does not relay; `status` is 404 or 405."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class UnknownModel(RequestRefused, LookupError):
    """A request named a model that is not configured; the message lists the ones that are."""

    status = 404

    def __init__(self, name: str | None, known: list[str]) -> None:
        # The requested name is not repeated: error bodies carry no text the request controls.
        what = "the model the request names is not served here" if name is not None else "the request names no model"
        super().__init__(f"{what}; the configured models are: {', '.join(known)} (GET /v1/models lists them)")
        self.name = name


class BadRouteRequest(RequestRefused):
    """A /v1 request whose engine the daemon cannot choose (its body unreadable, its model unknown); `document()` is
    the OpenAI-style error body, in the shape vLLM's own errors have, so clients handle both alike."""

    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind, self.param = kind, param

    def document(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}}


class NothingLearnt(RequestRefused):
    """The learnt hot vocabulary cannot be used yet (counting is off, or too few tokens were counted)."""

    status = 409


class Unavailable(RequestRefused):
    """The request cannot be served now; `reason` is for the client, `retry_after_s` for its Retry-After."""

    status = 503

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s
