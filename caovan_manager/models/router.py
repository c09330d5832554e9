"""The relay's Router over the configured models: the request's `model` (a name or an alias) picks the engine.

Without a models table every request goes to the one engine, unread. With one, the daemon reads the model from the
JSON body; a request that names none goes to the first entry, as vLLM serves a request without a model with its first
served name. GET /v1/models lists every configured model, loaded or not, with its state, and GET /v1/models/{id}
shows one: both are answered by the daemon, so looking a model up never loads it.
"""

from __future__ import annotations

import json
import time

from caovan_manager.errors import BadRouteRequest, UnknownModel
from caovan_manager.proxy.routes import Answer, Route

from .catalog import Catalog
from .slot import ModelSlot


class ModelRouter:
    def __init__(self, catalog: Catalog, slots: dict[str, ModelSlot]) -> None:
        self.catalog = catalog
        self.slots = slots
        self.created = int(time.time())

    def route(self, method: str, path: str, body: bytes, content_type: str) -> Route | Answer:
        if path.startswith("models/") and method in ("GET", "HEAD"):  # one model's card: answered here, loading
            return self._card(path[len("models/"):])  # nothing (vLLM serves only the list)
        if not self.catalog.routed:
            return self.slots[self.catalog.primary.name].route
        if path == "models" and method in ("GET", "HEAD"):
            return Answer(200, self.listing())
        if not body or "json" not in content_type.lower():  # media types are case-insensitive (RFC 9110)
            return self._named(None)
        try:
            document = json.loads(body)
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            # The decoder's message names a position and the kind of fault, never the body's text.
            raise BadRouteRequest(400, f"the request body is not valid JSON ({exc}); the daemon reads its `model` "
                                     f"to choose the engine", "BadRequestError") from None
        except RecursionError:
            raise BadRouteRequest(400, "the request body is JSON nested too deeply to read; send a flat document",
                                "BadRequestError") from None
        model = document.get("model") if isinstance(document, dict) else None
        if model is not None and not isinstance(model, str):
            raise BadRouteRequest(400, f"`model` must be a string naming one of: {', '.join(self.catalog.names)}",
                                "BadRequestError", "model")
        return self._named(model)

    def _named(self, model: str | None) -> Route:
        if model is None:
            return self.slots[self.catalog.primary.name].route
        try:
            return self.slots[self.catalog.lookup(model).name].route
        except UnknownModel as exc:
            raise BadRouteRequest(404, str(exc), "NotFoundError", "model") from None

    def _card(self, model: str) -> Answer:
        try:
            name = self.catalog.get_named(model).name
        except UnknownModel as exc:
            raise BadRouteRequest(404, str(exc), "NotFoundError", "model") from None
        return Answer(200, next(card for card in self.listing()["data"] if card["id"] == name))

    def listing(self) -> dict:
        """OpenAI's model list, each entry with its state, aliases and GPUs (extra fields clients ignore)."""
        data = []
        for entry in self.catalog:
            machine = self.slots[entry.name].machine
            data.append({"id": entry.name, "object": "model", "created": self.created, "owned_by": "caovan",
                         "state": machine.state.value, "aliases": list(entry.aliases),
                         "gpus": None if entry.gpus is None else sorted(entry.gpus)})
        return {"object": "list", "data": data}
