"""The supervisor's loop: one task takes messages one at a time, lets the machine decide, and tells observers.

Commands from the API wait for the machine's Outcome; reports from the effects layer are posted without waiting.
Reads that gate a change (is the engine ready? is an activation running?) happen inside the machine, in this loop.
After each message the loop publishes what changed: a StateChanged to the state followers (placement), the
observer (the model's metrics) and the events stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.inbox import Inbox, Outcome
from caovan_manager.logwatch.events import PUBLISHED_KINDS, LogEvent

from .machine import Machine
from .messages import Command, LogLine, Message
from .run import TENSORCORE75_KINDS, TensorCore75View
from .state import State, StateChanged

logger = logging.getLogger("caovan.supervisor")


class RunObserver(Protocol):
    """What one model's engine did, for its metrics (caovan_manager.metrics.ModelMetrics)."""

    name: str

    def state_changed(self, change: StateChanged) -> None: ...

    def new_run(self, version_label: str) -> None: ...

    def log_event(self, event: LogEvent) -> None: ...

    def tensorcore75_changed(self, view: TensorCore75View) -> None: ...


class Supervisor:
    def __init__(self, observer: RunObserver, events: Broadcaster[dict[str, Any]]) -> None:
        self.observer = observer
        self.model = observer.name
        self.events = events
        self.machine: Machine | None = None  # attached once the effects (which post here) exist
        self.ready_callbacks: list[Callable[[], None]] = []
        # Told of every state change (the placement owner follows here); called in this loop, so keep them short.
        self.followers: list[Callable[[StateChanged], None]] = []
        self._inbox: Inbox[Message] = Inbox(f"caovan-supervisor-{self.model}", self._step, logger)

    def attach(self, machine: Machine) -> None:
        self.machine = machine
        self.observer.state_changed(StateChanged(self.model, machine.state))

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
            self.observer.log_event(message.event)
            if message.event.kind in TENSORCORE75_KINDS:
                self.observer.tensorcore75_changed(m.run.tensorcore75)
            if message.event.kind in PUBLISHED_KINDS:
                self.events.publish({"type": "log_event", "time": time.time(), "model": self.model,
                                     "run_id": message.run_id, **message.event.to_json()})
        run_id = m.run.run_id if m.run else None
        if run_id != before[2]:
            self.observer.new_run(m.run.version or f"bundled-{m.bundled_version}")
        if (m.state, m.reason) != before[:2]:
            became_ready = m.state is State.READY and before[0] is not State.READY
            change = StateChanged(
                self.model, m.state, holds_gpus=m.leftovers, previous=before[0], reason=m.reason, run_id=run_id,
                restarts=m.restarts,
                ready_after_s=m.run.ready_at - m.run.started_at if became_ready and m.run.ready_at is not None
                else None)
            self.observer.state_changed(change)
            self.events.publish(change.event())
            logger.info("engine %s (%s): %s", m.state.value, self.model, m.reason)
            for follower in self.followers:
                follower(change)
            if became_ready:
                for callback in self.ready_callbacks:
                    callback()
        return outcome
