"""Doctor results: one Check per thing looked at, each PASS / WARN / FAIL / SKIP with a one-line fix."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum


class CheckStatus(str, Enum):
    """A check's verdict; FAIL makes the doctor's exit code 1."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Check:
    group: str  # the id `--only` selects (python, torch, gpus, triton, ...)
    name: str
    status: CheckStatus
    detail: str  # what was found
    fix: str = ""  # one line: what to do (empty when nothing is to be done)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return data


@dataclass
class Report:
    caovan_version: str
    checks: list[Check] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if any(c.status is CheckStatus.FAIL for c in self.checks) else 0

    def summary(self) -> dict[str, int]:
        return {s.value: sum(c.status is s for c in self.checks) for s in CheckStatus}

    def to_dict(self) -> dict:
        return {"caovan_version": self.caovan_version, "exit_code": self.exit_code, "summary": self.summary(),
                "checks": [c.to_dict() for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
