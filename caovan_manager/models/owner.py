"""The placement owner's loop and its real effects: it takes one message at a time, lets the Placement machine
decide, and carries the decisions to the models' supervisors, timers and metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.config import SwapSettings
from caovan_manager.inbox import Inbox, Outcome
from caovan_manager.supervisor.messages import (
    SleepCommand,
    StartCommand,
    StopCommand,
)

from .catalog import Catalog
from .placement import Demand, Pending, Placement, PlacementMessage
from .slot import ModelSlot

logger = logging.getLogger("caovan.models")


class SlotEffects:
    """Placement's effects on the real slots."""

    def __init__(self, slots: dict[str, ModelSlot], post: Any, events: Broadcaster[dict[str, Any]]) -> None:
        self.slots = slots
        self.post = post
        self.events = events
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def start(self, model: str, reason: str) -> None:
        logger.info("loading %s: %s", model, reason)
        self.slots[model].supervisor.post(StartCommand(reason))

    def stop(self, model: str, reason: str) -> None:
        logger.info("unloading %s: %s", model, reason)
        self.slots[model].supervisor.post(StopCommand(reason))

    def sleep(self, model: str, reason: str) -> None:
        logger.info("putting %s to sleep: %s", model, reason)
        self.slots[model].supervisor.post(SleepCommand(reason))

    def pending(self, model: str) -> int:
        return self.slots[model].gate.pending

    def set_timer(self, name: str, delay_s: float, message: PlacementMessage) -> None:
        self.cancel_timer(name)
        self._timers[name] = asyncio.get_running_loop().call_later(max(delay_s, 0), self.post, message)

    def cancel_timer(self, name: str) -> None:
        handle = self._timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def swapped_in(self, model: str, evicted: list[str], waited_s: float) -> None:
        logger.info("swapped %s in for %s in %.1f s", model, ", ".join(evicted), waited_s)
        self.slots[model].metrics.swapped_in(waited_s)
        self.events.publish({"type": "swap", "time": time.time(), "model": model, "evicted": evicted,
                             "seconds": round(waited_s, 2)})

    def used(self, model: str) -> None:
        self.slots[model].metrics.used(time.time())


class PlacementOwner:
    """Placement's loop. Each slot tells it of its state changes (supervisor), demand and pending requests (gate)."""

    def __init__(self, catalog: Catalog, slots: dict[str, ModelSlot], swap: SwapSettings,
                 events: Broadcaster[dict[str, Any]]) -> None:
        self._inbox: Inbox[PlacementMessage] = Inbox("caovan-placement", self._handle, logger)
        self.slots = slots
        self.effects = SlotEffects(slots, self.post, events)
        self.placement = Placement(catalog, self.effects, swap.fairness_s, swap.idle_s, time.monotonic)
        for name, slot in slots.items():
            slot.supervisor.followers.append(self.post)
            slot.gate.on_demand = lambda name=name: self.post(Demand(name))
            slot.gate.on_pending = lambda count, name=name: self.post(Pending(name, count))

    def _handle(self, message: PlacementMessage) -> Outcome | None:
        return self.placement.handle(message)

    def post(self, message: PlacementMessage) -> None:
        self._inbox.post(message)

    async def command(self, message: PlacementMessage) -> Outcome:
        outcome = await self._inbox.command(message)
        if outcome.then is not None:  # placement decided; the model's supervisor carries it out and answers
            return await self.slots[message.model].supervisor.command(outcome.then)
        return outcome

    def start(self) -> None:
        self._inbox.start()

    async def stop_loop(self) -> None:
        self.effects.cancel_all()
        await self._inbox.stop()
