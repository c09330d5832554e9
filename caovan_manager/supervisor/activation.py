"""A plugin activation's A/B: measure the current version, restart on the new one, check its banner, measure again,
keep it or roll back. The machine drives the steps (they are engine transitions); this module holds the activation's
facts and the verdict on its two measurements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from caovan_manager.config import PluginSettings

from .messages import Measurement

# baseline: measuring the current version; switch: restarting on the new one; verify: checking banner and speed;
# rollback: restarting on the previous version.
Phase = Literal["baseline", "switch", "verify", "rollback"]


@dataclass
class PluginChoice:
    """The plugin version the engines start on (None = bundled). With several models one choice is shared by all
    their machines; only a verified activation, on the primary model's machine, changes it."""

    version: str | None = None


@dataclass
class Activation:
    from_version: str | None
    to_version: str | None
    phase: Phase = "baseline"
    baseline: Measurement | None = None
    candidate: Measurement | None = None
    banner_checked: bool = False
    reason: str = ""

    def launch_version(self) -> tuple[bool, str | None]:
        """(True, the version the next start runs on) while the activation decides it; (False, None) otherwise."""
        if self.phase in ("switch", "verify"):
            return True, self.to_version
        if self.phase == "rollback":
            return True, self.from_version
        return False, None

    def details(self, settings: PluginSettings) -> dict[str, Any]:
        """What the store records with the verdict."""
        return {
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "candidate": self.candidate.as_dict() if self.candidate else None,
            "throughput_margin": settings.throughput_margin,
            "acceptance_margin": settings.acceptance_margin,
        }


def regression(baseline: Measurement | None, new: Measurement, settings: PluginSettings) -> str:
    """Why the new version is worse than the baseline beyond the configured margins, or "" if it is not."""
    margin_tps = settings.throughput_margin
    margin_acc = settings.acceptance_margin
    if baseline is None:
        return ""
    floor = baseline.tokens_per_s * (1 - margin_tps)
    if new.tokens_per_s < floor:
        return (f"throughput fell to {new.tokens_per_s:.1f} tokens/s from {baseline.tokens_per_s:.1f} "
                f"(allowed down to {floor:.1f}, plugins.throughput_margin = {margin_tps:g})")
    if baseline.acceptance_rate is not None:
        if new.acceptance_rate is None:
            return "the new version reports no speculative-decoding acceptance; the previous one did"
        if new.acceptance_rate < baseline.acceptance_rate - margin_acc:
            return (f"MTP acceptance fell to {new.acceptance_rate:.3f} from {baseline.acceptance_rate:.3f} "
                    f"(allowed loss {margin_acc:g}, plugins.acceptance_margin)")
    return ""
