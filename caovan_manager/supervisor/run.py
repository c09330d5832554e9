"""One engine run's facts, folded from its log: its markers, TensorCore75's counts, its launch and its last fatal line.

The machine owns the current Run; everything here is plain data plus the fold of one log event into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from caovan_kernels import contract
from caovan_manager.logwatch import events

MARKER_KINDS = tuple(marker.kind for marker in contract.RUN_MARKERS)
TENSORCORE75_KINDS = (contract.TENSORCORE75_STATUS.kind, contract.TENSORCORE75_KERNELS.kind)


@dataclass
class TensorCore75View:
    """TensorCore75 over the engine's processes (each prints its own lines): active if any process is, and the
    counts of the process that compiled the most kernels."""

    status: events.TensorCore75Status | None = None
    kernels: events.TensorCore75Kernels | None = None

    def take(self, event: events.LogEvent) -> None:
        if isinstance(event, events.TensorCore75Status):
            if self.status is None or event.active or not self.status.active:
                self.status = event
        elif isinstance(event, events.TensorCore75Kernels):
            if self.kernels is None or event.total >= self.kernels.total:
                self.kernels = event


@dataclass
class Run:
    """One engine process from spawn to the end of its process group."""

    run_id: int
    version: str | None
    started_at: float
    pid: int | None = None
    command: list[str] = field(default_factory=list)
    ready_at: float | None = None
    returncode: int | None = None
    last_fatal: str | None = None
    markers: dict[str, events.LogEvent] = field(default_factory=dict)  # the latest of each kind of RUN_MARKERS
    engine_version: str | None = None
    mtp_tokens: int | None = None
    launch: events.LaunchDecisions | None = None  # caovan-vllm-serve's decisions line: the effective command
    tensorcore75: TensorCore75View = field(default_factory=TensorCore75View)

    def take(self, event: events.LogEvent) -> None:
        """Fold one of the run's log events into its facts (events that are no run fact are ignored)."""
        if isinstance(event, events.Fatal):
            self.last_fatal = f"{event.fatal_kind}: {event.message}"
        elif isinstance(event, events.EngineConfig):
            self.engine_version = event.version
            self.mtp_tokens = event.mtp_tokens
        elif isinstance(event, events.LaunchDecisions):
            self.launch = event
        elif event.kind in TENSORCORE75_KINDS:
            self.tensorcore75.take(event)
        elif event.kind in MARKER_KINDS:
            self.markers[event.kind] = event

    def marker_values(self) -> dict[str, Any]:
        """Each marker seen: its one value, its values, or True for a marker without values."""
        return {kind: _marker_value(event) for kind, event in self.markers.items()}

    @property
    def banner_version(self) -> str | None:
        banner = self.markers.get(contract.BANNER.kind)
        return banner.version if isinstance(banner, events.PluginBanner) else None


def _marker_value(event: events.LogEvent) -> Any:
    values = event.values()
    if not values:
        return True
    return next(iter(values.values())) if len(values) == 1 else values
