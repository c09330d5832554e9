"""The supervisor's loop: one task takes messages one at a time, lets the machine decide, and tells observers.

Commands from the API wait for the machine's Outcome; reports from the effects layer are posted without waiting.
Reads that gate a change (is the engine ready? is an activation running?) happen inside the machine, in this loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from caovan_manager.logwatch.events import PUBLISHED_KINDS
from caovan_manager.metrics import ModelMetrics

from .bus import Broadcaster
from .inbox import Inbox
from .machine import TENSORCORE75_KINDS, Machine
from .messages import Command, LogLine, Message, Outcome, State

logger = logging.getLogger("caovan.supervisor")


class Supervisor:
    def __init__(self, metrics: ModelMetrics, events: Broadcaster[dict[str, Any]]) -> None:
        self.metrics = metrics
        self.model = metrics.name
        self.events = events
        self.machine: Machine | None = None  # attached once the effects (which post here) exist
        self.ready_callbacks: list[Callable[[], None]] = []
        # Told of every state change (the placement owner listens here); called in this loop, so keep them short.
        self.state_callbacks: list[Callable[[State, str], None]] = []
        self._inbox: Inbox[Message] = Inbox(f"caovan-supervisor-{self.model}", self._step, logger)

    def attach(self, machine: Machine) -> None:
        self.machine = machine
        self.metrics.state_changed(machine.state)

    def post(self, message: Message) -> None:
        self._inbox.post(message)

    async def command(self, command: Command) -> Outcome:
        return await self._inbox.command(command)

    def start(self) -> None:
        self._inbox.start()

    async def stop_loop(self) -> None:
        await self._inbox.stop()

    async def wait_for(self, predicate: Callable[[Machine], bool], timeout_s: float) -> bool:
        """Wait until the machine satisfies `predicate` (checked after each message); for shutdown and tests."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with self.events.subscribe() as queue:
            while not predicate(self.machine):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(queue.get(), min(remaining, 1.0))
                except asyncio.TimeoutError:
                    continue
        return True

    def _step(self, message: Message) -> Outcome | None:
        m = self.machine
        before = (m.state, m.reason, m.run.run_id if m.run else None)
        outcome = m.handle(message)
        if isinstance(message, LogLine) and m.run and message.run_id == m.run.run_id:
            self.metrics.log_event(message.event)
            if message.event.kind in TENSORCORE75_KINDS:
                self.metrics.tensorcore75_changed(m.run.tensorcore75)
            if message.event.kind in PUBLISHED_KINDS:
                self.events.publish({"type": "log_event", "time": time.time(), "model": self.model,
                                     "run_id": message.run_id, **message.event.to_json()})
        run_id = m.run.run_id if m.run else None
        if run_id != before[2]:
            self.metrics.new_run(m.run.version or f"bundled-{m.bundled_version}")
        if (m.state, m.reason) != before[:2]:
            self.metrics.state_changed(m.state)
            if m.state is State.READY and m.state is not before[0] and m.run.ready_at is not None:
                self.metrics.ready_after(m.run.ready_at - m.run.started_at)
            self.events.publish({"type": "state", "time": time.time(), "model": self.model, "state": m.state.value,
                                 "reason": m.reason, "run_id": run_id, "restarts": m.restarts})
            logger.info("engine %s (%s): %s", m.state.value, self.model, m.reason)
            for listener in self.state_callbacks:
                listener(m.state, m.reason)
            if m.state is State.READY and before[0] is not State.READY:
                for callback in self.ready_callbacks:
                    callback()
        return outcome
