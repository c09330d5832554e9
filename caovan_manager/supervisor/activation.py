"""A verified switch's A/B: measure the engine as it runs, restart it changed, check that the change is live, measure
again, keep it or roll back. Two changes ride on it: a plugin version (its banner checked; kept unless throughput or
acceptance fell beyond the margins) and DraftVocab's setting (its engine line checked; kept only if tokens/s rose
and acceptance held). The machine drives the steps (they are engine transitions); this module holds the switch's
facts and the verdicts on its two measurements."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from caovan_manager.config import PluginSettings

from .messages import DraftSetting, Measurement

# baseline: measuring the current version; switch: restarting on the new one; verify: checking banner and speed;
# rollback: restarting on the previous version.
Phase = Literal["baseline", "switch", "verify", "rollback"]
# What the switch changes: the plugin version, or the caovan_draft_vocab setting the engine starts with.
Kind = Literal["plugin", "draft_vocab"]


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
    kind: Kind = "plugin"
    from_draft: DraftSetting = None  # a draft_vocab switch's settings (a plugin activation keeps the current one)
    to_draft: DraftSetting = None

    def launch(self) -> tuple[bool, str | None, DraftSetting]:
        """(True, the version and DraftVocab setting the next start runs on) while the switch decides them; (False,
        None, None) otherwise."""
        if self.phase in ("switch", "verify"):
            return True, self.to_version, self.to_draft
        if self.phase == "rollback":
            return True, self.from_version, self.from_draft
        return False, None, None

    def details(self, settings: PluginSettings) -> dict[str, Any]:
        """What the store records with the verdict."""
        common = {
            "kind": self.kind,
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "candidate": self.candidate.as_dict() if self.candidate else None,
            "acceptance_margin": settings.acceptance_margin,
        }
        if self.kind == "draft_vocab":
            return {**common, "from_draft_vocab": self.from_draft, "to_draft_vocab": self.to_draft,
                    "draft_vocab_min_speedup": settings.draft_vocab_min_speedup}
        return {**common, "throughput_margin": settings.throughput_margin}


def draft_label(setting: DraftSetting) -> str:
    """A DraftVocab setting as messages name it."""
    return "off" if setting is None else json.dumps(setting)


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
    return _acceptance_loss(baseline, new, margin_acc)


def draft_vocab_shortfall(baseline: Measurement, new: Measurement, settings: PluginSettings) -> str:
    """Why a DraftVocab setting is not worth keeping ("" if it is): it must make decoding faster (tokens/s above the
    baseline times plugins.draft_vocab_min_speedup) without costing acceptance beyond plugins.acceptance_margin. The
    answers cannot change (the target verifies every draft); only speed and acceptance can."""
    reasons = [_acceptance_loss(baseline, new, settings.acceptance_margin)]
    floor = baseline.tokens_per_s * settings.draft_vocab_min_speedup
    if not new.tokens_per_s > floor:
        reasons.append(f"throughput {new.tokens_per_s:.1f} tokens/s did not rise above {floor:.1f} (baseline "
                       f"{baseline.tokens_per_s:.1f} x plugins.draft_vocab_min_speedup = "
                       f"{settings.draft_vocab_min_speedup:g}): the hot vocabulary saves nothing measurable here")
    return "; ".join(reason for reason in reasons if reason)


def _acceptance_loss(baseline: Measurement, new: Measurement, margin: float) -> str:
    if baseline.acceptance_rate is None:
        return ""
    if new.acceptance_rate is None:
        return "the new engine reports no speculative-decoding acceptance; the previous one did"
    if new.acceptance_rate < baseline.acceptance_rate - margin:
        return (f"MTP acceptance fell to {new.acceptance_rate:.3f} from {baseline.acceptance_rate:.3f} "
                f"(allowed loss {margin:g}, plugins.acceptance_margin)")
    return ""
