"""What the state machine may ask for. Every call returns at once; results come back later as reports.

The real implementation is caovan_manager.engine.effects.EngineEffects; unit tests use a recording fake.
"""

from __future__ import annotations

from typing import Any, Protocol

from caovan_manager.canary.verdict import CanaryVerdict, Purpose

from .messages import DraftSetting, Message

RESTART_CAUSES = ("requested", "crash", "start_failed", "hang", "activation", "rollback", "wake_failed", "canary")


class Effects(Protocol):
    # The engine process ----------------------------------------------------------------------------------------------
    def spawn(self, run_id: int, version: str | None, fallback: bool = False, draft_vocab: DraftSetting = None) -> None:
        """Start the engine on plugin `version` (None = bundled), with canary.fallback_args added if `fallback` and
        caovan_draft_vocab set to `draft_vocab` unless None;
        reports Spawned or SpawnFailed, later Exited."""

    def probe_ready(self, run_id: int) -> None:
        """Poll /health, then send a tiny completion; reports ReadyProbe."""

    def stop_group(self, run_id: int) -> None:
        """SIGTERM the process group, wait the grace, SIGKILL, check none is left and the GPU memory is free;
        reports StoppedGroup."""

    def sleep(self, run_id: int) -> None:
        """Ask the drained engine to sleep (vLLM's POST /sleep, level 1); reports Slept."""

    def wake(self, run_id: int) -> None:
        """Ask the sleeping engine to wake up (POST /wake_up); reports Woke."""

    def watch_progress(self, run_id: int) -> None:
        """Sample the engine's /metrics periodically; reports Progress until stop_watching."""

    def stop_watching(self) -> None: ...

    def measure(self, run_id: int) -> None:
        """Run the verification benchmark on the running engine; reports Measured."""

    def canary(self, run_id: int, purpose: Purpose) -> None:
        """Check the engine's answers (OutputLock's canary, bounded by canary.timeout_s); a periodic run sends each
        request only when no user request is in flight; reports CanaryChecked."""

    # Time -------------------------------------------------------------------------------------------------------------
    def set_timer(self, name: str, delay_s: float, message: Message) -> None:
        """Deliver `message` after `delay_s`, replacing a timer of the same name."""

    def cancel_timer(self, name: str) -> None: ...

    # Requests through the proxy ---------------------------------------------------------------------------------------
    def gate_open(self, run_id: int) -> None:
        """Let requests through to this run's engine (queued ones first)."""

    def gate_hold(self) -> None:
        """New requests wait in the bounded queue."""

    def gate_idle(self) -> None:
        """The engine is stopped but loads on demand: new requests wait in the queue and ask for it."""

    def gate_reject(self, reason: str) -> None:
        """New and queued requests get a 503 with this reason."""

    def drain(self, run_id: int, timeout_s: float) -> None:
        """Wait for the requests in flight to this run's engine to finish, at most timeout_s; reports Drained."""

    # Records ----------------------------------------------------------------------------------------------------------
    def record_run(self, run_id: int, version: str | None) -> None: ...

    def record_run_end(self, run_id: int, returncode: int | None, reason: str) -> None: ...

    def record_restart(self, run_id: int | None, cause: str, reason: str) -> None:
        """cause: one of RESTART_CAUSES (a metric label); reason: the full sentence."""

    def record_activation(self, from_version: str | None, to_version: str | None, outcome: str, reason: str,
                          details: dict[str, Any], subject: str) -> None:
        """A switch's verdict (store, events, log); `subject` names it ("plugin activation A -> B", ...)."""

    def save_active_version(self, version: str | None) -> None: ...

    def save_draft_vocab(self, setting: DraftSetting) -> None:
        """The DraftVocab setting later starts take (None: off)."""

    def record_canary(self, verdict: CanaryVerdict, degraded: bool) -> None:
        """A canary verdict, for the metrics, the events stream and the daemon's log; `degraded`: the engine now
        carries the condition (its last completed canary failed)."""
