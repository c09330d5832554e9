"""An engine's states, the one table of legal changes between them, and the typed fact of a change.

The machine (caovan_manager.supervisor.machine) is the only writer; every change it makes is checked against
TRANSITIONS before it happens, so a decision that would move an engine along an edge nobody drew is refused loudly
(in the unit tests, and in the daemon's log with the message that led to it) instead of moving the engine into a state
the rest of the daemon does not expect. A change is
published once, as a StateChanged, to everyone who follows the engine (the events stream, the metrics, placement).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from caovan_manager.errors import IllegalTransition


class State(str, Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    # Serving (its /health and a completion answered) but not yet counted ready: OutputLock's canary checks its answers
    # first, so requests, placement and an activation's verdict never see an engine that answers wrong.
    CHECKING = "checking"
    READY = "ready"
    DRAINING = "draining"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FAILED = "failed"
    # vLLM's sleep mode (level 1): weights offloaded to host memory and the KV cache dropped, the process kept, so
    # another model can use the GPU and this one comes back without a cold start.
    FALLING_ASLEEP = "falling_asleep"
    ASLEEP = "asleep"
    WAKING = "waking"


# Where each state may go next. Staying in a state (a new reason) is always allowed.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.STOPPED: frozenset({State.STARTING}),
    State.FAILED: frozenset({State.STARTING, State.STOPPED}),
    State.BACKOFF: frozenset({State.STARTING, State.STOPPED}),
    State.STARTING: frozenset({State.CHECKING, State.READY, State.STOPPING}),  # ready directly: no canary
    State.CHECKING: frozenset({State.READY, State.STOPPING}),
    State.READY: frozenset({State.DRAINING, State.STOPPING}),
    State.DRAINING: frozenset({State.READY, State.FALLING_ASLEEP, State.STOPPING}),  # ready again: a sleep called off
    State.FALLING_ASLEEP: frozenset({State.ASLEEP, State.WAKING, State.STOPPING}),
    State.ASLEEP: frozenset({State.WAKING, State.STOPPING}),
    State.WAKING: frozenset({State.CHECKING, State.READY, State.STOPPING}),
    State.STOPPING: frozenset({State.STOPPED, State.STARTING, State.BACKOFF, State.FAILED}),
}


# What the proxy's gate does on entering each state: let requests through to the run's engine, hold them in the queue,
# refuse them (the engine failed), treat them as a stopped engine's (they wait and ask for it where models load on
# demand, else they are refused with how to start it), or nothing (it holds already).
GateOnEntry = Literal["open", "hold", "failed", "stopped", "keep"]
GATE_ON_ENTRY: dict[State, GateOnEntry] = {
    State.STOPPED: "stopped",
    State.STARTING: "hold",
    State.CHECKING: "hold",
    State.READY: "open",
    State.DRAINING: "hold",
    State.STOPPING: "hold",
    State.BACKOFF: "keep",  # entered from stopping
    State.FAILED: "failed",
    State.FALLING_ASLEEP: "keep",  # entered from draining
    State.ASLEEP: "stopped",
    State.WAKING: "hold",
}


def check_transition(before: State, after: State) -> None:
    """Raise IllegalTransition unless the table allows going from `before` to `after`."""
    if after is not before and after not in TRANSITIONS[before]:
        raise IllegalTransition(before.value, after.value)


@dataclass(frozen=True)
class StateChanged:
    """An engine entered a state (or stayed in it with a new reason). The supervisor publishes it after the machine
    decided; followers read it, they do not keep their own idea of the engine's state."""

    model: str
    state: State
    holds_gpus: bool = False  # failed with processes that survived SIGKILL: its GPUs are not free
    previous: State | None = None
    reason: str = ""
    run_id: int | None = None
    restarts: int = 0
    ready_after_s: float | None = None  # on becoming ready after a start: spawn to ready
    at: float = field(default_factory=time.time)

    def event(self) -> dict[str, Any]:
        """The line on the daemon's /events stream."""
        return {"type": "state", "time": self.at, "model": self.model, "state": self.state.value,
                "reason": self.reason, "run_id": self.run_id, "restarts": self.restarts}
