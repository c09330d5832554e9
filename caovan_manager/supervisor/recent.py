"""The recent past of the daemon's event stream: what a page opened now needs to draw the last minutes.

The dashboard's charts span ten minutes. A page opened now (a second browser, a phone, a reload) would otherwise show
nothing until the engine's next sample; so the daemon keeps the samples and changes of that window, every model's,
and /events sends them to each new subscriber before the live events.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from caovan_manager.logwatch.events import SpecDecode, Throughput

WINDOW_S = 600.0
# Samples every 10 s per model for ten minutes, plus state changes: a few hundred items per model.
MAX_ITEMS = 20_000
# Event types a page draws or lists; log_event items only of the sample kinds (markers and config lines are in
# /status, which the stream sends first).
KEPT_TYPES = frozenset({"state", "swap", "activation", "canary"})
SAMPLE_KINDS = frozenset({Throughput.kind, SpecDecode.kind})


def kept(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return kind in KEPT_TYPES or (kind == "log_event" and item.get("kind") in SAMPLE_KINDS)


class RecentEvents:
    """Events of the last `window_s` seconds, oldest first, bounded in count; one per daemon, fed by its bus."""

    def __init__(self, window_s: float = WINDOW_S, max_items: int = MAX_ITEMS,
                 clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.clock = clock
        self._items: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_items)

    def record(self, item: dict[str, Any]) -> None:
        if kept(item):
            self._items.append(item)
            self._prune()

    def items(self) -> list[dict[str, Any]]:
        self._prune()
        return list(self._items)

    def _prune(self) -> None:
        oldest = self.clock() - self.window_s
        while self._items and self._items[0].get("time", oldest) < oldest:
            self._items.popleft()
