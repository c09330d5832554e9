"""A recording fake of the supervisor's effects layer: every call is kept, nothing runs."""

from __future__ import annotations

from typing import Any

from caovan_manager.canary.verdict import CanaryVerdict, Purpose
from caovan_manager.supervisor.effects import Effects
from caovan_manager.supervisor.messages import Message


class RecordingEffects(Effects):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.timers: dict[str, tuple[float, Message]] = {}

    def _record(self, *call: Any) -> None:
        self.calls.append(call)

    def spawn(self, run_id: int, version: str | None, fallback: bool = False, draft_vocab: Any = None) -> None:
        self._record("spawn", run_id, version, *(("fallback",) if fallback else ()),
                     *(() if draft_vocab is None else (("draft_vocab", draft_vocab),)))

    def probe_ready(self, run_id: int) -> None: self._record("probe_ready", run_id)
    def stop_group(self, run_id: int) -> None: self._record("stop_group", run_id)
    def sleep(self, run_id: int) -> None: self._record("sleep", run_id)
    def wake(self, run_id: int) -> None: self._record("wake", run_id)
    def watch_progress(self, run_id: int) -> None: self._record("watch_progress", run_id)
    def stop_watching(self) -> None: self._record("stop_watching")
    def measure(self, run_id: int) -> None: self._record("measure", run_id)
    def canary(self, run_id: int, purpose: Purpose) -> None: self._record("canary", run_id, purpose)
    def gate_open(self, run_id: int) -> None: self._record("gate_open", run_id)
    def gate_hold(self) -> None: self._record("gate_hold")
    def gate_idle(self) -> None: self._record("gate_idle")
    def gate_reject(self, reason: str) -> None: self._record("gate_reject", reason)
    def drain(self, run_id: int, timeout_s: float) -> None: self._record("drain", run_id, timeout_s)
    def record_run(self, run_id: int, version: str | None) -> None: self._record("record_run", run_id, version)

    def record_run_end(self, run_id: int, returncode: int | None, reason: str) -> None:
        self._record("record_run_end", run_id, returncode, reason)

    def record_restart(self, run_id: int | None, cause: str, reason: str) -> None:
        self._record("record_restart", run_id, cause, reason)

    def record_activation(self, from_version: str | None, to_version: str | None, outcome: str, reason: str,
                          details: dict[str, Any], subject: str) -> None:
        self._record("record_activation", from_version, to_version, outcome, reason, details, subject)

    def save_active_version(self, version: str | None) -> None: self._record("save_active_version", version)
    def save_draft_vocab(self, setting: Any) -> None: self._record("save_draft_vocab", setting)

    def record_canary(self, verdict: CanaryVerdict, degraded: bool) -> None:
        self._record("record_canary", verdict.result, degraded)

    def set_timer(self, name: str, delay_s: float, message: Message) -> None:
        self.timers[name] = (delay_s, message)
        self._record("set_timer", name, delay_s)

    def cancel_timer(self, name: str) -> None:
        self.timers.pop(name, None)

    # Helpers for tests ------------------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]

    def take(self) -> list[tuple[Any, ...]]:
        calls, self.calls = self.calls, []
        return calls

    def fire(self, name: str) -> Message:
        """The message of a pending timer, as the real effects would deliver it when it expires."""
        return self.timers.pop(name)[1]
