"""The shapes of the daemon's answers, for its OpenAPI document (and the property tests generated from it).

Models forbid extra fields: a field the code adds without adding it here fails the tests instead of vanishing from
the documentation."""

from __future__ import annotations

from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from caovan_kernels.contract import TensorCore75Counts
from caovan_manager.canary.verdict import CanaryVerdict, Disagreement


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(Strict):
    """An error the daemon answers itself (401, 404, 400): what happened and what to do."""

    detail: str


class ControlResult(Strict):
    accepted: bool
    message: str
    state: str


class Health(Strict):
    status: str


class Readiness(Strict):
    ready: bool
    state: str
    reason: str


class LogRecord(Strict):
    time: float
    run_id: int | None
    source: str
    line: str


class LogTail(Strict):
    lines: list[LogRecord]
    file: str | None


class EngineRun(Strict):
    run_id: int
    alive: bool
    pid: int | None
    address: str | None  # `unix:<socket>`: the engine listens on no TCP port
    uptime_s: float
    ready_s: float | None
    vllm_version: str | None
    mtp_tokens: int | None


class DaemonProcess(Strict):
    pid: int
    uptime_s: float


class Launch(Strict):
    daemon_command: list[str]
    profile_applied: bool | None
    decisions: list[dict[str, str]]


class PluginState(Strict):
    active_version: str | None
    bundled_version: str
    running_version: str | None


class MarkerRow(Strict):
    kind: str
    label: str
    seen: bool
    text: str | None


# The count line's fields as the contract defines them (one definition), held as strictly as the rest.
TensorCore75Kernels = create_model(
    "TensorCore75Kernels", __base__=Strict, __doc__=TensorCore75Counts.__doc__,
    **{name: (kind, ...) for name, kind in get_type_hints(TensorCore75Counts).items()})


class TensorCore75State(Strict):
    state: str | None
    triton: str | None
    mode: str | None
    detail: str | None
    kernels: TensorCore75Kernels | None


# A canary verdict as CanaryVerdict.as_dict gives it (the dataclasses define the fields once).
CanaryEvidence = create_model(
    "CanaryEvidence", __base__=Strict, __doc__=Disagreement.__doc__,
    **{name: (kind, ...) for name, kind in get_type_hints(Disagreement).items()})
CanaryRun = create_model(
    "CanaryRun", __base__=Strict, __doc__="One canary run's verdict: passed, failed (with the first disagreement as "
                                          "evidence) or not_run (with the reason in detail).",
    evidence=(CanaryEvidence | None, ...), agreement=(float | None, ...),
    **{name: (kind, ...) for name, kind in get_type_hints(CanaryVerdict).items()
       if name not in ("evidence", "margins")})


class CanaryState(Strict):
    """OutputLock's canary of one engine: its settings, the last verdict and the degraded condition."""

    enabled: bool
    action: str
    interval_s: float
    running: str | None  # the purpose of the run in progress
    runs: int
    last: CanaryRun | None
    degraded: CanaryRun | None  # the failed verdict the engine is degraded by, until a canary passes
    fallback_args: list[str] | None  # the arguments its runs carry after canary.action = fallback


class CanaryAnswer(Strict):
    model: str
    state: str
    degraded: bool
    verdict: CanaryRun


class HangDetectorView(Strict):
    timeout_s: float
    pending_requests: float
    generated_tokens: float | None
    last_sample_s_ago: float | None
    last_token_s_ago: float | None
    stalled_s: float | None
    unreachable_s: float | None
    last_verdict: str | None
    last_verdict_s_ago: float | None


class RecentRestart(Strict):
    at: float
    cause: str
    reason: str


class ActivationState(Strict):
    kind: str = Field(description="plugin (a version swap) or draft_vocab (a DraftVocab switch)")
    from_version: str | None
    to_version: str | None
    from_draft_vocab: Any = None
    to_draft_vocab: Any = None
    phase: str
    baseline: dict[str, float | int | None] | None


class DraftVocabState(Strict):
    setting: Any = Field(description="The kept caovan_draft_vocab setting engines start with (null: off).")
    engine: dict[str, Any] | None = Field(description="The running engine's DraftVocab line (null: none logged).")
    switch_in_progress: bool
    last_switch: dict[str, Any] | None = Field(description="The latest switch's verdict: outcome, reason, both "
                                                           "measurements.")
    learnt: dict[str, Any] = Field(description="The count of relayed reply tokens behind the learnt hot vocabulary: "
                                               "whether it counts (why not), its file, tokens, replies, skipped.")
    history: list[dict[str, Any]] | None = None


class ProxyState(Strict):
    in_flight: int
    queued: int
    gate: str


class ModelState(Strict):
    """One configured model: where it runs, what its engine does, its requests."""

    name: str
    aliases: list[str]
    gpus: list[int] | None
    model: str
    state: str
    reason: str
    state_seconds: float
    run_id: int | None
    pid: int | None
    address: str | None  # `unix:<socket>`, the engine's only listener
    ready_s: float | None
    ttl_s: float
    preload: bool
    last_used: float | None
    swaps: int
    proxy: ProxyState
    canary: CanaryState


class ModelList(Strict):
    routed: bool
    fairness_s: float
    models: list[ModelState]


class StatusDocument(Strict):
    state: str
    reason: str
    state_seconds: float
    daemon: DaemonProcess
    engine: EngineRun | None
    model: str | None
    embedded_default: bool
    command: list[str]
    launch: Launch
    plugin: PluginState
    markers: dict[str, Any]
    marker_list: list[MarkerRow]
    tensorcore75: TensorCore75State | None
    latest: dict[str, dict[str, Any]]
    restarts: int
    recent_restarts: list[RecentRestart]
    consecutive_failures: int
    last_error: str
    hang_detector: HangDetectorView
    activation: ActivationState | None
    draft_vocab: DraftVocabState
    canary: CanaryState
    proxy: ProxyState
    models: list[ModelState]


UNAUTHORIZED = {401: {"model": Problem, "description": "a key is needed (security.*): `Authorization: Bearer <key>`"}}
# Any request: what the front door (caovan_manager.api.door) refuses before routing, and the daemon's answer to
# parameters or a body that do not fit the schema (api.errors: words, never FastAPI's list that echoes the input).
DOOR = {400: {"model": Problem, "description": "a request target with two readings (dot-segments, encoded '.', '/', "
                                              "'\\' or '%', control characters, empty segments), or a deciding "
                                              "header sent twice"},
        403: {"model": Problem, "description": "a Host that is neither an IP address nor a name the daemon answers "
                                              "to (security.allowed_hosts)"},
        405: {"model": Problem, "description": "a method the daemon does not answer"},
        413: {"model": Problem, "description": "a body over 1 MiB (the daemon's own calls)"},
        422: {"model": Problem, "description": "parameters or a body that do not fit this schema, named in words"}}
# What the front door and the admin check answer on any call that changes state.
ADMIN_CALL = {**UNAUTHORIZED,
              403: {"model": Problem, "description": "cross-site (a foreign Origin), or from another machine while "
                                                     "no admin key is configured"},
              415: {"model": Problem, "description": "neither a JSON body nor an Authorization header: a form a web "
                                                     "page could send cross-site"}}
TEXT = {"content": {"text/plain": {"schema": {"type": "string"}}}}
EVENT_STREAM = {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                "description": "server-sent events, one JSON object per `data:` line; the stream does not end"}
