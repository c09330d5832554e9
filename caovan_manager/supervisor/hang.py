"""The hang detector: from the engine's forward-progress samples, is it hung, and why?

A hang is work pending with no token generated for `timeout_s`, or an engine whose /metrics does not answer that
long. Any new token resets the clock, so a generation that keeps producing tokens is never a hang, however slowly
it goes and however long it runs. The machine owns one detector and asks it on every sample; /status shows what the
detector saw and, once it acted, why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .messages import Progress


@dataclass
class HangDetector:
    timeout_s: float
    stalled_since: float | None = None  # first sample of the current run of samples without a new token
    unreachable_since: float | None = None
    last_generated: float | None = None
    last_sample_at: float | None = None
    last_progress_at: float | None = None  # when a new token was last seen
    last_pending: float = 0.0
    verdict: str = ""  # why it last declared a hang (kept across runs for /status)
    verdict_at: float | None = None

    def reset(self) -> None:
        """A new engine became ready: its counters start again."""
        self.stalled_since = self.unreachable_since = self.last_generated = None
        self.last_sample_at = self.last_progress_at = None
        self.last_pending = 0.0

    def observe(self, sample: Progress, now: float) -> str:
        """The hang's reason if this sample makes the engine hung, else ""."""
        reason = self._judge(sample, now)
        if reason:
            self.verdict, self.verdict_at = reason, now
        return reason

    def _judge(self, sample: Progress, now: float) -> str:
        limit = self.timeout_s
        if not sample.ok:
            if self.unreachable_since is None:
                self.unreachable_since = now
            elif now - self.unreachable_since >= limit:
                return (f"the engine is hung: its /metrics did not answer for {now - self.unreachable_since:.0f} s "
                        f"({sample.detail}; supervisor.hang_timeout_s = {limit:g})")
            return ""
        self.unreachable_since = None
        self.last_pending = sample.running
        progressed = self.last_generated is None or sample.generated_total > self.last_generated
        if progressed:
            self.last_progress_at = now
        stalled = sample.running > 0 and not progressed
        if not stalled:
            self.stalled_since = None
        elif self.stalled_since is None:
            self.stalled_since = self.last_sample_at
        elif now - self.stalled_since >= limit:
            return (f"the engine is hung: {sample.running:g} request(s) pending and no token generated for "
                    f"{now - self.stalled_since:.0f} s (supervisor.hang_timeout_s = {limit:g})")
        self.last_generated = sample.generated_total
        self.last_sample_at = now
        return ""

    def view(self, now: float) -> dict[str, Any]:
        """What /status shows: the rule, what the last samples said, and the last verdict."""
        def ago(at: float | None) -> float | None:
            return None if at is None else round(now - at, 1)

        return {
            "timeout_s": self.timeout_s,
            "pending_requests": self.last_pending,
            "generated_tokens": self.last_generated,
            "last_sample_s_ago": ago(self.last_sample_at),
            "last_token_s_ago": ago(self.last_progress_at),
            "stalled_s": ago(self.stalled_since),
            "unreachable_s": ago(self.unreachable_since),
            "last_verdict": self.verdict or None,
            "last_verdict_s_ago": ago(self.verdict_at),
        }
