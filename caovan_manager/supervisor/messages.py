"""What the supervisor receives, one at a time: commands from the API and reports from the effects layer.

Reports carry the run they belong to; the machine drops those of a run that is no longer current, so a late report
of an old engine never moves the state of the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from caovan_manager.canary.verdict import CanaryVerdict
from caovan_manager.logwatch import events

# Commands (the API's requests; each gets an Outcome back) -----------------------------------------------------------

@dataclass(frozen=True)
class StartCommand:
    reason: str = "start requested"


@dataclass(frozen=True)
class StopCommand:
    reason: str = "stop requested"


@dataclass(frozen=True)
class SleepCommand:
    """Drain, then put the engine to sleep (a stop, where its launch has no sleep mode)."""

    reason: str = "sleep requested"


@dataclass(frozen=True)
class RestartCommand:
    reason: str = "restart requested"


@dataclass(frozen=True)
class ActivateCommand:
    version: str | None  # None = the plugin bundled with the daemon


# A caovan_draft_vocab value as --additional-config takes it (a size, {"file": ..., "size": ...}); None = off.
DraftSetting = int | str | dict[str, Any] | None


@dataclass(frozen=True)
class DraftVocabCommand:
    """Switch DraftVocab to this caovan_draft_vocab value, verified (POST /draft-vocab); None turns it off."""

    setting: DraftSetting


@dataclass(frozen=True)
class CanaryCommand:
    """Check the ready engine's answers now (POST /models/{name}/canary)."""


Command = (StartCommand | StopCommand | SleepCommand | RestartCommand | ActivateCommand | DraftVocabCommand
           | CanaryCommand)


# Reports of the effects layer ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spawned:
    run_id: int
    pid: int
    command: list[str]


@dataclass(frozen=True)
class SpawnFailed:
    run_id: int
    error: str


@dataclass(frozen=True)
class Exited:
    run_id: int
    returncode: int
    last_line: str = ""  # the engine's last output line, for a reason when no fatal line was recognised


@dataclass(frozen=True)
class EngineAnswer:
    """An HTTP conversation with the engine that succeeded or failed; `detail` says why it failed."""

    run_id: int
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ReadyProbe(EngineAnswer):
    """Result of the readiness check: /health answered and a tiny real completion came back."""


@dataclass(frozen=True)
class StartupTimedOut:
    run_id: int


@dataclass(frozen=True)
class Drained:
    run_id: int  # the run whose requests were drained
    remaining: int  # requests still in flight when the drain ended (0 = all finished)


@dataclass(frozen=True)
class StoppedGroup:
    """The engine's process group after SIGTERM/SIGKILL; `leftovers` describes processes that would not die."""

    run_id: int
    leftovers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Slept(EngineAnswer):
    """The engine's answer to POST /sleep (ok=False also when it did not answer in time)."""


@dataclass(frozen=True)
class Woke(EngineAnswer):
    """The engine's answer to POST /wake_up."""


@dataclass(frozen=True)
class BackoffElapsed:
    run_id: int


@dataclass(frozen=True)
class Progress:
    """One forward-progress sample: requests pending (engine running/waiting or held by the proxy) and the engine's
    generated-token total from its /metrics; ok=False when it did not answer."""

    run_id: int
    ok: bool
    running: float = 0.0
    generated_total: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class LogLine:
    run_id: int
    event: events.Event


@dataclass(frozen=True)
class Measurement:
    """The verification benchmark: generation tokens/s and MTP acceptance (0..1, None without drafts)."""

    tokens_per_s: float
    acceptance_rate: float | None
    tokens: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"tokens_per_s": round(self.tokens_per_s, 3), "acceptance_rate": self.acceptance_rate,
                "tokens": self.tokens}


@dataclass(frozen=True)
class Measured:
    run_id: int
    result: Measurement | None
    error: str = ""


@dataclass(frozen=True)
class BannerTimedOut:
    run_id: int


@dataclass(frozen=True)
class CanaryDue:
    """The periodic canary's timer."""

    run_id: int


@dataclass(frozen=True)
class CanaryChecked:
    """A canary run's verdict (passed, failed, or not run with the reason)."""

    run_id: int
    verdict: CanaryVerdict


Report = (Spawned | SpawnFailed | Exited | ReadyProbe | StartupTimedOut | Drained | StoppedGroup | BackoffElapsed
          | Progress | LogLine | Measured | BannerTimedOut | Slept | Woke | CanaryDue | CanaryChecked)
Message = Command | Report
