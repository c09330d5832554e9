"""The result of a launch profile: vLLM arguments, environment, and one reason per decision."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Decision:
    name: str  # AutoSpec, AutoMem, DynamicTP, Elastic-KV, dtype, flags, ...
    value: str
    reason: str


@dataclass
class LaunchProfile:
    model: str
    args: list[str]  # the full vLLM argument list (user args first, then the profile's own flags)
    env: dict[str, str]
    decisions: list[Decision]
    device: str  # what it planned for ("2x RTX 2080 Ti sm75 (--gpus ...)", "CPU")
    vllm: str  # the vLLM it planned for and how its abilities were found
    memory: dict[str, int] = field(default_factory=dict)  # per-GPU byte counts behind the decisions

    def decision(self, name: str) -> Decision:
        for d in self.decisions:
            if d.name == name:
                return d
        raise KeyError(f"no decision named {name!r} in this profile ({', '.join(d.name for d in self.decisions)})")

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
