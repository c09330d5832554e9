"""Which engine a /v1 request goes to: the relay asks a Router, the models' owner (caovan_manager.models) answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .gate import Gate
from .token_tally import TokenTally


@dataclass(frozen=True)
class Route:
    model: str  # the configured name: the metrics label
    gate: Gate
    engine_headers: dict[str, str]  # the engine's own --api-key, if it has one
    # Why the running engine decodes greedily only (caovan_manager.proxy.sampling), or None; read once admitted.
    greedy_only: Callable[[], str | None] = lambda: None
    tally: TokenTally | None = None  # counts the model's replies for DraftVocab's learnt hot vocabulary


@dataclass(frozen=True)
class Answer:
    """A /v1 request the daemon answers itself, successfully (the list of configured models, one model's card), with
    an OpenAI-shaped document."""

    status: int
    document: dict[str, Any]


class Router(Protocol):
    def route(self, method: str, path: str, body: bytes, content_type: str) -> Route | Answer:
        """The route of a request below /v1/ (`path` without the prefix), or the daemon's own Answer; raises
        BadRouteRequest where no engine can be chosen."""
