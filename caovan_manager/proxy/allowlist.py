"""What the daemon relays to an engine: an allowlist of vLLM's inference routes, not a prefix.

vLLM's server answers far more than the OpenAI API: its /metrics, /version and docs, /invocations and /pooling, and,
with VLLM_SERVER_DEV_MODE=1 (which sleep mode needs), developer routes such as /server_info (the whole config),
/collective_rpc (a method call on every worker), /pause and /reset_prefix_cache. None of those may be reached through
the daemon; only the routes below, each with its method, matched on the request's path below /v1/ (the front door,
caovan_manager.api.door, has already refused every path that could be read two ways).

Left out on purpose: vLLM's /tokenize and /detokenize (outside /v1, not part of the OpenAI API; every response's
`usage` counts tokens), LoRA loading and unloading (they change the engine for every user: an admin's act), and the
render, derender and batch helpers of vLLM 0.32 (not OpenAI routes; a client of `vllm serve` does not call them).
The README's "Security" section lists the same routes; a test holds the two to one set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from caovan_manager.errors import NotRelayed


@dataclass(frozen=True)
class RelayedRoute:
    method: str
    template: str  # below /v1/; `{name}` is one path segment, `{name:path}` the rest of the path

    @property
    def pattern(self) -> re.Pattern[str]:
        parts = re.split(r"(\{[a-z_]+(?::path)?\})", self.template)
        regex = "".join(("[^/]+" if not part.endswith(":path}") else ".+") if part.startswith("{") else re.escape(part)
                        for part in parts)
        return re.compile(regex)

    @property
    def label(self) -> str:
        """The metrics label: the template itself, so clients cannot grow the label space."""
        return "/v1/" + self.template.replace(":path", "")


RELAYED: tuple[RelayedRoute, ...] = (
    RelayedRoute("POST", "chat/completions"),
    RelayedRoute("POST", "completions"),
    RelayedRoute("GET", "models"),
    RelayedRoute("GET", "models/{model:path}"),  # model ids may hold slashes (Qwen/Qwen3.6-27B)
    RelayedRoute("POST", "embeddings"),
    RelayedRoute("POST", "responses"),
    RelayedRoute("GET", "responses/{response_id}"),
    RelayedRoute("POST", "responses/{response_id}/cancel"),
    RelayedRoute("POST", "audio/transcriptions"),
    RelayedRoute("POST", "audio/translations"),
    RelayedRoute("POST", "score"),
    RelayedRoute("POST", "rerank"),
    RelayedRoute("POST", "messages"),  # Anthropic's Messages API, as vLLM serves it
    RelayedRoute("POST", "messages/count_tokens"),
)
_COMPILED = tuple((route, route.pattern) for route in RELAYED)
UNMATCHED_LABEL = "/v1/other"


def match(method: str, path: str) -> RelayedRoute:
    """The relayed route of `method path` (path below /v1/); raises NotRelayed with a fixed description."""
    on_path = [route for route, pattern in _COMPILED if pattern.fullmatch(path)]
    for route in on_path:
        if route.method == method or (method == "HEAD" and route.method == "GET"):
            return route
    if on_path:
        allowed = ", ".join(sorted({route.method for route in on_path}))
        raise NotRelayed(405, f"this API route takes {allowed} only")
    raise NotRelayed(404, "no such API route: the daemon relays the OpenAI API routes listed in its README "
                          "(/v1/chat/completions, /v1/completions, /v1/models, ...) and nothing else of the engine")
