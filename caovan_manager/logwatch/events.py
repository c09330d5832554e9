"""Typed events read from a vLLM engine log: what the daemon, its metrics and `caovan parse-log` act on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

FatalKind = Literal[
    "oom",
    "gpu_memory_insufficient",
    "kv_cache_insufficient",
    "triton_smem",
    "nccl",
    "cuda_error",
    "port_in_use",
    "engine_start_failed",
    "engine_dead",
]


@dataclass(frozen=True, slots=True)
class LogEvent:
    """Base of every event: `kind` names the event type in JSON and on the daemon's event stream."""

    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: `kind` first, then the fields under their own names."""
        out: dict[str, Any] = {"kind": self.kind}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True)
class Throughput(LogEvent):
    """The engine's periodic stats line (every 10 s while busy)."""

    kind: ClassVar[str] = "throughput"
    prompt_tps: float
    generation_tps: float
    running: int
    waiting: int
    kv_cache_usage_pct: float
    prefix_cache_hit_pct: float | None = None
    engine_index: int | None = None  # the `Engine 002:` number of data-parallel engines


@dataclass(frozen=True, slots=True)
class SpecDecode(LogEvent):
    """Speculative-decoding stats of one logging interval; acceptance rates are fractions 0..1."""

    kind: ClassVar[str] = "spec_decode"
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    accepted: int
    drafted: int
    per_position: tuple[float, ...] | None  # a list in to_json()
    accepted_tps: float | None
    drafted_tps: float | None


@dataclass(frozen=True, slots=True)
class EngineConfig(LogEvent):
    """The engine's startup line `Initializing ... LLM engine (vX) with config: ...`."""

    kind: ClassVar[str] = "engine_config"
    version: str | None
    mtp_tokens: int | None  # speculative tokens per step; None without speculative decoding
    model: str | None


@dataclass(frozen=True, slots=True)
class EngineReady(LogEvent):
    """uvicorn's `Application startup complete.`: the API server accepts requests."""

    kind: ClassVar[str] = "engine_ready"


@dataclass(frozen=True, slots=True)
class PluginBanner(LogEvent):
    kind: ClassVar[str] = "plugin_banner"
    version: str


@dataclass(frozen=True, slots=True)
class PluginMode(LogEvent):
    kind: ClassVar[str] = "plugin_mode"
    mode: str


@dataclass(frozen=True, slots=True)
class PluginMtp(LogEvent):
    kind: ClassVar[str] = "plugin_mtp"
    tokens: int


@dataclass(frozen=True, slots=True)
class PluginRealPrefill(LogEvent):
    """`[Caovan GDNCore] ACTIVE REAL PREFILL`: our prefill kernel ran on a real request."""

    kind: ClassVar[str] = "plugin_real_prefill"


@dataclass(frozen=True, slots=True)
class PluginDispatch(LogEvent):
    """`Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed`: our decode kernel ran on a real request."""

    kind: ClassVar[str] = "plugin_dispatch"


@dataclass(frozen=True, slots=True)
class Fatal(LogEvent):
    """A line that explains why the engine failed or will fail; `message` is the line without its wrapping."""

    kind: ClassVar[str] = "fatal"
    fatal_kind: FatalKind
    message: str


Event = (
    Throughput
    | SpecDecode
    | EngineConfig
    | EngineReady
    | PluginBanner
    | PluginMode
    | PluginMtp
    | PluginRealPrefill
    | PluginDispatch
    | Fatal
)
