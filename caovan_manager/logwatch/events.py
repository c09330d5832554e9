"""Typed events read from a vLLM engine log: what the daemon, its metrics and `caovan parse-log` act on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from caovan_kernels import contract

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

    def values(self) -> dict[str, Any]:
        """The fields under their own names, JSON-ready (tuples as lists)."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, dict) \
                else value
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: `kind` first, then the fields."""
        return {"kind": self.kind, **self.values()}


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


# The plugin's lines: each event is its marker's facts as the contract defines them (caovan_kernels.contract), with
# the marker's kind.

@dataclass(frozen=True, slots=True)
class PluginBanner(LogEvent, contract.Banner):
    kind: ClassVar[str] = contract.BANNER.kind


@dataclass(frozen=True, slots=True)
class PluginMode(LogEvent, contract.Mode):
    kind: ClassVar[str] = contract.MODE.kind


@dataclass(frozen=True, slots=True)
class PluginMtp(LogEvent, contract.Mtp):
    kind: ClassVar[str] = contract.MTP.kind


@dataclass(frozen=True, slots=True)
class PluginGdnCore(LogEvent, contract.GdnCoreVerdict):
    kind: ClassVar[str] = contract.GDNCORE.kind


@dataclass(frozen=True, slots=True)
class PluginRealPrefill(LogEvent):
    """`[Caovan GDNCore] ACTIVE REAL PREFILL`: our prefill kernel ran on a real request."""

    kind: ClassVar[str] = contract.REAL_PREFILL_MARKER.kind


@dataclass(frozen=True, slots=True)
class PluginDispatch(LogEvent):
    """`Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed`: our decode kernel ran on a real request."""

    kind: ClassVar[str] = contract.DISPATCH_MARKER.kind


@dataclass(frozen=True, slots=True)
class PluginKernelCalls(LogEvent, contract.KernelCalls):
    kind: ClassVar[str] = contract.CALLS.kind


@dataclass(frozen=True, slots=True)
class PluginDeviceSteps(LogEvent, contract.DeviceSteps):
    kind: ClassVar[str] = contract.STEPS.kind


@dataclass(frozen=True, slots=True)
class TensorCore75Status(LogEvent, contract.TensorCore75Verdict):
    """One engine process's TensorCore75 verdict (its fields are the contract's)."""

    kind: ClassVar[str] = contract.TENSORCORE75_STATUS.kind


@dataclass(frozen=True, slots=True)
class TensorCore75Kernels(LogEvent, contract.TensorCore75Counts):
    """One process's compiled-kernel counts (its fields are the contract's)."""

    kind: ClassVar[str] = contract.TENSORCORE75_KERNELS.kind


@dataclass(frozen=True, slots=True)
class PluginDraftVocab(LogEvent, contract.DraftVocabVerdict):
    """What the MTP drafter scores (its fields are the contract's)."""

    kind: ClassVar[str] = contract.DRAFT_VOCAB_MARKER.kind


@dataclass(frozen=True, slots=True)
class PluginSplitKv(LogEvent, contract.SplitKvVerdict):
    """Whether the MTP verify's attention runs through the split-KV kernel (its fields are the contract's)."""

    kind: ClassVar[str] = contract.SPLIT_KV_MARKER.kind


@dataclass(frozen=True, slots=True)
class LaunchDecisions(LogEvent):
    """The decisions line of `caovan-vllm-serve`: each profile decision and the effective vLLM command."""

    kind: ClassVar[str] = contract.DECISIONS_KIND
    profile: bool
    decisions: tuple[dict[str, str], ...]
    command: tuple[str, ...]


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
    | LaunchDecisions
    | PluginBanner
    | PluginMode
    | PluginMtp
    | PluginGdnCore
    | PluginRealPrefill
    | PluginDispatch
    | PluginKernelCalls
    | PluginDeviceSteps
    | TensorCore75Status
    | TensorCore75Kernels
    | PluginDraftVocab
    | PluginSplitKv
    | Fatal
)

# The plugin's events by kind, for the parser.
MARKER_EVENTS: dict[str, type[LogEvent]] = {cls.kind: cls for cls in (
    PluginBanner, PluginMode, PluginMtp, PluginGdnCore, PluginRealPrefill, PluginDispatch, PluginKernelCalls,
    PluginDeviceSteps, TensorCore75Status, TensorCore75Kernels, PluginDraftVocab, PluginSplitKv)}
# Kinds worth a line on the daemon's /events stream: all but engine_ready, which only moves the state.
PUBLISHED_KINDS: frozenset[str] = frozenset(
    {Throughput.kind, SpecDecode.kind, EngineConfig.kind, LaunchDecisions.kind, Fatal.kind, *MARKER_EVENTS})
