"""The engine-daemon contract: every line the plugin and `caovan-vllm-serve` print for the daemon to read.

One place owns each line's text (a format function the emitter calls), the pattern that reads it back, and its
kind (the event name the daemon's parser, state machine, metrics, /status and dashboard use). It also owns the
launch facts both sides share: the decisions line of `caovan-vllm-serve`, the stale environment prefixes and the
embedded default. Plain Python only: the daemon imports it without torch or vLLM.

Patterns are searched in a log line's bare message (the daemon strips wrapping first), so a marker is found
wherever the engine's logger puts it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# --- launch facts shared by the planner and the daemon -------------------------------------------------------------

MTP_DEFAULT = 3  # draft tokens AutoSpec picks when nothing limits it, on CPU and GPU alike

# A model swapped out by sleep: the daemon adds this vLLM flag, the profile drops it where vLLM has no sleep mode,
# and the daemon reads the effective command of the decisions line to know which one it got.
SLEEP_MODE_FLAG = "--enable-sleep-mode"

# Variables of the retired FlashQLA path: the doctor warns about them, the daemon keeps them out of the engine.
STALE_ENV_PREFIXES: tuple[str, ...] = ("CAOVAN_FLASHQLA_",)

# The embedded default (vLLM's CPU build, the demo model). What the launch profile decides on a CPU (bfloat16, MTP,
# no prefix caching) is not restated here: `caovan-vllm-serve` applies the profile to these arguments.
EMBEDDED_SERVED_MODEL_NAME = "caovan-demo"
EMBEDDED_MAX_MODEL_LEN = 2048
EMBEDDED_KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: the demo model needs little


def cache_dir() -> Path:
    """Caovan's cache (demo models, the inspected vLLM's abilities, plugin builds): CAOVAN_CACHE_DIR (the
    plugin's variable too), else ~/.cache/caovan."""
    return Path(os.environ.get("CAOVAN_CACHE_DIR") or Path.home() / ".cache" / "caovan")


def embedded_engine_args() -> list[str]:
    return ["--served-model-name", EMBEDDED_SERVED_MODEL_NAME, "--max-model-len", str(EMBEDDED_MAX_MODEL_LEN)]


def embedded_engine_env() -> dict[str, str]:
    return {"VLLM_CPU_KVCACHE_SPACE": str(EMBEDDED_KV_CACHE_GIB)}


# --- the plugin's markers ------------------------------------------------------------------------------------------

PLUGIN_NAME = "Caovan vLLM SM75 Turbo3 external plugin"
REAL_PREFILL = "[Caovan GDNCore] ACTIVE REAL PREFILL"
DISPATCH = "Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed"
DEVICE_STEPS = "[Caovan GDNCore] decode steps on the GPU"
KERNEL_CALLS = "[Caovan GDNCore] kernel calls"
GPU_COUNTED = "counted on the GPU"  # the decode count of kernel_calls_line when the GPU counts decode steps
TENSORCORE75 = "[Caovan TensorCore75]"
# The choices of the two mode settings (the same words, two settings): caovan_mode (GDNCore: auto runs our kernels
# where they measured faster, off is stock vLLM, force runs them everywhere) and caovan_turing_mma (TensorCore75).
CAOVAN_MODES = ("auto", "off", "force")
TENSORCORE75_MODES = CAOVAN_MODES
# How the plugin's on/off environment variables (CAOVAN_ENABLE, CAOVAN_REQUIRE_TURBO3) spell "on".
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
# caovan_split_kv: auto takes the MTP verify's attention where plan.plan_launch does, off leaves vLLM's throughout.
SPLIT_KV_MODES = ("auto", "off")
# The launch profile's decision on it, by this name.
SPLIT_KV_DECISION = "SplitKV verify"
TURING_PROXY = "[Caovan Turing proxy]"
DRAFT_VOCAB = "[Caovan DraftVocab]"
SPLIT_KV = "[Caovan SplitKV]"


def banner_line(version: str) -> str:
    return f"{PLUGIN_NAME} v{version}"


def mode_line(mode: str) -> str:
    return f"caovan_mode={mode}"


def mtp_line(tokens: int) -> str:
    return f"speculative_config=auto MTP={tokens}"


def gdncore_line(active: bool, reason: str) -> str:
    return f"[Caovan GDNCore] {'kernels active' if active else 'kernels not used'}: {_one_line(reason)}"


def kernel_calls_line(prefill: int, decode: int | None) -> str:
    """decode None: decode steps are counted on the GPU (CUDA graphs), see device_steps_line."""
    return f"{KERNEL_CALLS}: prefill={prefill} decode={GPU_COUNTED if decode is None else decode}"


def device_steps_line(steps: int) -> str:
    return f"{DEVICE_STEPS}: {steps} (first GDN layer, CUDA graph replays included)"


# --- what each marker line says: its facts, defined once here; the daemon's events derive from these classes ------


@dataclass(frozen=True, slots=True)
class Banner:
    version: str


@dataclass(frozen=True, slots=True)
class Mode:
    mode: str


@dataclass(frozen=True, slots=True)
class Mtp:
    tokens: int


@dataclass(frozen=True, slots=True)
class GdnCoreVerdict:
    """Whether GDNCore's kernels serve this engine, and why (once per process)."""

    active: bool
    reason: str


@dataclass(frozen=True, slots=True)
class KernelCalls:
    """GDNCore calls counted on the host at 1, 10, 100, ...; decode None when the GPU counts decode steps."""

    prefill: int
    decode: int | None


@dataclass(frozen=True, slots=True)
class DeviceSteps:
    """Decode steps counted on the GPU by the first GDN layer (CUDA graph replays included)."""

    steps: int


@dataclass(frozen=True, slots=True)
class TensorCore75Verdict:
    """The facts of TensorCore75's status line, once per engine process: whether sm_75 tensor-core retargeting is on,
    with which Triton (`none` when Triton is not importable), in which mode, and why (free text). The daemon's event,
    /status and metrics take these fields from here."""

    active: bool
    triton: str
    mode: str
    detail: str

    def line(self) -> str:
        if self.mode not in TENSORCORE75_MODES:
            raise ValueError(f"TensorCore75 mode {self.mode!r} is not one of {', '.join(TENSORCORE75_MODES)}")
        if not re.fullmatch(r"\S+", self.triton or ""):
            raise ValueError(f"TensorCore75 triton version {self.triton!r} must be one word (`none` without Triton)")
        state = "ACTIVE" if self.active else "off"
        return f"{TENSORCORE75} {state} triton={self.triton} mode={self.mode}: {_one_line(self.detail)}"


@dataclass(frozen=True, slots=True)
class TensorCore75Counts:
    """The facts of TensorCore75's count line, at 1, 10, 100, ... kernels compiled in one process: how many were
    retargeted to sm_75 tensor cores and how many kept on FMA, by reason (lowercase words with underscores). The
    daemon's event, /status and metrics take these fields from here."""

    total: int
    retargeted: int
    kept: int
    kept_by_reason: dict[str, int]

    @classmethod
    def of(cls, retargeted: int, kept: Mapping[str, int]) -> TensorCore75Counts:
        for reason, count in kept.items():
            if not REASON_KEY.fullmatch(reason):
                raise ValueError(f"TensorCore75 kept reason {reason!r} must be lowercase words joined by underscores")
            if count < 0:
                raise ValueError(f"TensorCore75 kept count for {reason} is negative ({count})")
        if retargeted < 0:
            raise ValueError(f"TensorCore75 retargeted count is negative ({retargeted})")
        kept_total = sum(kept.values())
        return cls(retargeted + kept_total, retargeted, kept_total, dict(kept))

    def line(self) -> str:
        reasons = " ".join(f"{reason}={self.kept_by_reason[reason]}" for reason in sorted(self.kept_by_reason))
        return (f"{TENSORCORE75} kernels={self.total} retargeted={self.retargeted} kept={self.kept} "
                f"({reasons})")


@dataclass(frozen=True, slots=True)
class DraftVocabVerdict:
    """What the MTP drafter scores, once per engine process that builds a drafter with caovan_draft_vocab set: `hot`
    of the model's `vocab` token ids when active (why or from where: `detail`), or the whole vocabulary and why not.
    The daemon's event, /status and the draft-vocabulary switch take these fields from here."""

    active: bool
    hot: int
    vocab: int
    detail: str

    def line(self) -> str:
        if self.active and not 0 < self.hot < self.vocab:
            raise ValueError(f"DraftVocab active with {self.hot} of {self.vocab} ids: a hot set is a proper subset")
        state = "ACTIVE" if self.active else "off"
        return f"{DRAFT_VOCAB} {state} hot={self.hot} vocab={self.vocab}: {_one_line(self.detail)}"


@dataclass(frozen=True, slots=True)
class SplitKvVerdict:
    """Whether the MTP verify's attention runs through the split-KV kernel in this engine process, and for which
    batches or why not (free text). The daemon's event and /status take these fields from here."""

    active: bool
    detail: str

    def line(self) -> str:
        return f"{SPLIT_KV} {'ACTIVE' if self.active else 'off'}: {_one_line(self.detail)}"


def tensorcore75_status_line(active: bool, triton: str, mode: str, detail: str) -> str:
    """TensorCore75Verdict's line."""
    return TensorCore75Verdict(active, triton, mode, detail).line()


def tensorcore75_count_line(retargeted: int, kept: Mapping[str, int]) -> str:
    """TensorCore75Counts' line."""
    return TensorCore75Counts.of(retargeted, kept).line()


def tensorcore75_retargeted_line(kernels: Sequence[str]) -> str:
    """Once compiling settles in a process, beside its count line: which kernels (by name) run on tensor cores.
    Logged for people, not parsed by the daemon (the count line carries the numbers)."""
    return f"{TENSORCORE75} retargeted kernels ({len(kernels)}): {', '.join(kernels) or 'none'}"


def tensorcore75_autotune_line(kernel: str, configs: int, timed: int, same_code: int, spilling: int) -> str:
    """Once per autotuned kernel compiled for sm_75 with TensorCore75: how many of the configurations left by the
    autotuner's own pruning it times, the others being ones that compile to the same code under the retarget's one
    pipeline stage, and ones that spill to local memory while another does not. Logged for people, not parsed by
    the daemon."""
    if not re.fullmatch(r"\S+", kernel or ""):
        raise ValueError(f"TensorCore75 autotuned kernel name {kernel!r} must be one word")
    if min(configs, timed, same_code, spilling) < 0 or timed + same_code + spilling != configs:
        raise ValueError(f"TensorCore75 autotune counts for {kernel} must be non-negative and add up: {timed} timed + "
                         f"{same_code} same code + {spilling} spilling != {configs} configurations")
    return (f"{TENSORCORE75} autotune {kernel}: {configs} configurations -> {timed} timed ({same_code} same code "
            f"under one stage, {spilling} spill on sm_75)")


def turing_proxy_line(view: str) -> str:
    """Once per engine process run on the Turing proxy (a test tool, not parsed by the daemon)."""
    return f"{TURING_PROXY} sm_75 code path on this GPU (TRITON_OVERRIDE_ARCH=sm75, {view})"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


REASON_KEY = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


@dataclass(frozen=True)
class Marker:
    """One kind of plugin line: its event kind, how the dashboard names it, and how to read its values back."""

    kind: str
    label: str
    pattern: re.Pattern[str]
    facts: Callable[[re.Match[str]], Any]  # the line's facts (one of the classes above), or None for a bare marker
    shown: Callable[[dict[str, Any]], str]  # the dashboard's text for the values

    def read(self, message: str) -> dict[str, Any] | None:
        """The line's values by field name, or None if the message is not this marker's line."""
        m = self.pattern.search(message)
        if m is None:
            return None
        facts = self.facts(m)
        return {} if facts is None else asdict(facts)


def _kept(listed: str) -> dict[str, int]:
    return {reason: int(count) for reason, count in (pair.split("=") for pair in listed.split())}


BANNER = Marker(
    "plugin_banner", "Plugin banner",
    re.compile(re.escape(PLUGIN_NAME) + r" v(\d[\w.+!-]*)"),
    lambda m: Banner(m.group(1).rstrip(".-")),
    lambda v: f"v{v['version']}")
MODE = Marker(
    "plugin_mode", "caovan_mode", re.compile(r"\bcaovan_mode=([\w.-]+)"),
    lambda m: Mode(m.group(1)), lambda v: v["mode"])
MTP = Marker(
    "plugin_mtp", "speculative MTP", re.compile(r"speculative_config=auto MTP=(\d+)"),
    lambda m: Mtp(int(m.group(1))), lambda v: f"n={v['tokens']}")
GDNCORE = Marker(
    "plugin_gdncore", "GDNCore kernels", re.compile(r"\[Caovan GDNCore\] kernels (active|not used): (.*)$"),
    lambda m: GdnCoreVerdict(m.group(1) == "active", m.group(2)),
    lambda v: f"{'active' if v['active'] else 'not used'} ({v['reason']})")
REAL_PREFILL_MARKER = Marker(
    "plugin_real_prefill", "GDNCore real prefill", re.compile(re.escape(REAL_PREFILL)),
    lambda m: None, lambda v: "active")
DISPATCH_MARKER = Marker(
    "plugin_dispatch", "Turbo3 dispatch", re.compile(re.escape(DISPATCH)),
    lambda m: None, lambda v: "confirmed")
CALLS = Marker(
    "plugin_kernel_calls", "GDNCore kernel calls",
    re.compile(re.escape(KERNEL_CALLS) + r": prefill=(\d+) decode=(\d+|" + re.escape(GPU_COUNTED) + ")"),
    lambda m: KernelCalls(int(m.group(1)), int(m.group(2)) if m.group(2).isdigit() else None),
    lambda v: f"prefill {v['prefill']}, decode {GPU_COUNTED if v['decode'] is None else v['decode']}")
STEPS = Marker(
    "plugin_device_steps", "GDNCore decode steps (GPU)", re.compile(re.escape(DEVICE_STEPS) + r": (\d+)"),
    lambda m: DeviceSteps(int(m.group(1))), lambda v: str(v["steps"]))
TENSORCORE75_STATUS = Marker(
    "tensorcore75_status", "TensorCore75",
    re.compile(re.escape(TENSORCORE75) + r" (ACTIVE|off) triton=(\S+) mode=(\w+): ?(.*)$"),
    lambda m: TensorCore75Verdict(m.group(1) == "ACTIVE", m.group(2), m.group(3), m.group(4)),
    lambda v: f"{'ACTIVE' if v['active'] else 'off'} (triton {v['triton']}, mode {v['mode']}): {v['detail']}")
TENSORCORE75_KERNELS = Marker(
    "tensorcore75_kernels", "TensorCore75 kernels",
    re.compile(re.escape(TENSORCORE75) + r" kernels=(\d+) retargeted=(\d+) kept=(\d+) \(((?:[a-z][a-z0-9_]*=\d+"
               r"(?: [a-z][a-z0-9_]*=\d+)*)?)\)"),
    lambda m: TensorCore75Counts(int(m.group(1)), int(m.group(2)), int(m.group(3)), _kept(m.group(4))),
    lambda v: f"{v['retargeted']} of {v['total']} retargeted, {v['kept']} kept")

DRAFT_VOCAB_MARKER = Marker(
    "plugin_draft_vocab", "DraftVocab",
    re.compile(re.escape(DRAFT_VOCAB) + r" (ACTIVE|off) hot=(\d+) vocab=(\d+): ?(.*)$"),
    lambda m: DraftVocabVerdict(m.group(1) == "ACTIVE", int(m.group(2)), int(m.group(3)), m.group(4)),
    lambda v: (f"drafter scores {v['hot']} of {v['vocab']} ids ({v['detail']})" if v["active"]
               else f"off ({v['detail']})"))

SPLIT_KV_MARKER = Marker(
    "plugin_split_kv", "SplitKV verify attention",
    re.compile(re.escape(SPLIT_KV) + r" (ACTIVE|off): ?(.*)$"),
    lambda m: SplitKvVerdict(m.group(1) == "ACTIVE", m.group(2)),
    lambda v: f"{'ACTIVE' if v['active'] else 'off'} ({v['detail']})")

# Most specific first: the GDNCore line's reason text mentions caovan_mode=..., which is not the mode marker.
MARKERS: tuple[Marker, ...] = (BANNER, REAL_PREFILL_MARKER, DISPATCH_MARKER, GDNCORE, CALLS, STEPS,
                               TENSORCORE75_STATUS, TENSORCORE75_KERNELS, DRAFT_VOCAB_MARKER, SPLIT_KV_MARKER, MODE,
                               MTP)
# Markers whose latest value /status shows per run; the TensorCore75 lines are combined over processes instead.
RUN_MARKERS: tuple[Marker, ...] = (BANNER, MODE, MTP, GDNCORE, REAL_PREFILL_MARKER, DISPATCH_MARKER, CALLS, STEPS,
                                   DRAFT_VOCAB_MARKER, SPLIT_KV_MARKER)
# Cheap test before any pattern runs: every marker line holds one of these.
MARKER_HINTS = ("Caovan", "caovan_mode=", "MTP=")


def read_marker(message: str) -> tuple[Marker, dict[str, Any]] | None:
    """The marker a bare log message carries, with its values, or None."""
    if not any(hint in message for hint in MARKER_HINTS):
        return None
    for marker in MARKERS:
        values = marker.read(message)
        if values is not None:
            return marker, values
    return None


# --- the decisions line of caovan-vllm-serve -----------------------------------------------------------------------

LAUNCHER = "caovan-vllm-serve"
DECISIONS_PREFIX = f"{LAUNCHER} decisions: "
DECISIONS_KIND = "launch_decisions"
# A decision the daemon acts on: the engine decodes greedily only (its value), with the reason. The daemon refuses the
# requests that would sample rather than relay them (caovan_manager.proxy.sampling).
SAMPLING_DECISION = "sampling"
GREEDY_ONLY = "greedy only"
# What a greedy-only engine takes as its generation config's temperature: a request that leaves `temperature` unset
# gets the model's default, and Qwen checkpoints ship 0.6 to 0.7 (the daemon's guard reads only what requests send).
GREEDY_DEFAULTS = {"temperature": 0.0}
# The memory plan's prediction of vLLM's own KV cache lines: its value is "N tokens" (vLLM's "GPU KV cache size"), its
# reason quotes the "Maximum concurrency for L tokens per request: Cx" line vLLM should log. The scale benchmark holds
# a start's log to it.
KV_REPORT_DECISION = "vLLM's KV report"


def launcher_line(text: str) -> str:
    """A line `caovan-vllm-serve` prints for people before vLLM starts (a decision, the command, an error)."""
    return f"{LAUNCHER}: {text}"


def is_launcher_line(line: str) -> bool:
    """Whether an engine log line is the launcher's own rather than vLLM's: its decisions quote the lines they
    predict vLLM will log ("Maximum concurrency ..."), so a reader of vLLM's lines must skip these."""
    return line.lstrip().startswith(LAUNCHER)


def decisions_line(decisions: Sequence[tuple[str, str, str]], command: Sequence[str], profile: bool) -> str:
    """One JSON line: each profile decision (name, value, reason), whether the profile ran, and the effective
    command (vLLM's server with its final arguments)."""
    body = {"profile": profile,
            "decisions": [{"name": name, "value": value, "reason": reason} for name, value, reason in decisions],
            "command": list(command)}
    return DECISIONS_PREFIX + json.dumps(body, separators=(",", ":"))


def read_decisions(message: str) -> dict[str, Any] | None:
    """The values of a decisions line (profile, decisions, command), or None if the message is not one."""
    at = message.find(DECISIONS_PREFIX)
    if at < 0:
        return None
    try:
        body = json.loads(message[at + len(DECISIONS_PREFIX):])
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    decisions, command = body.get("decisions"), body.get("command")
    if not (isinstance(decisions, list) and isinstance(command, list) and all(isinstance(c, str) for c in command)
            and all(isinstance(d, dict) and all(isinstance(d.get(k), str) for k in ("name", "value", "reason"))
                    for d in decisions)):
        return None
    return {"profile": bool(body.get("profile")),
            "decisions": [{k: d[k] for k in ("name", "value", "reason")} for d in decisions], "command": command}
