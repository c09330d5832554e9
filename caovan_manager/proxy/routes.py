"""Which engine a /v1 request goes to: the relay asks a Router, the models' owner (caovan_manager.models) answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .gate import Gate


@dataclass(frozen=True)
class Route:
    model: str  # the configured name: the metrics label
    gate: Gate
    engine_headers: dict[str, str]  # the engine's own --api-key, if it has one
    # Why the running engine decodes greedily only (caovan_manager.proxy.sampling), or None; read once admitted.
    greedy_only: Callable[[], str | None] = lambda: None


class NoRoute(Exception):
    """The daemon answers this request itself (the list of configured models, an unknown model, a body it cannot
    read the model from), with an OpenAI-style document."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error", {}).get("message", "answered by the daemon"))
        self.status = status
        self.body = body

    def document(self) -> dict[str, Any]:
        return self.body

    @classmethod
    def error(cls, status: int, message: str, kind: str, param: str | None = None) -> NoRoute:
        # The shape vLLM's own errors have, so clients handle both alike.
        return cls(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})


class Router(Protocol):
    def route(self, method: str, path: str, body: bytes, content_type: str) -> Route:
        """The route of a request below /v1/ (`path` without the prefix); raises NoRoute to answer it here."""
