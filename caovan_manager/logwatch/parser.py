"""vLLM engine log lines -> typed events, across vLLM's V0 and V1 engines and the ways logs arrive wrapped.

A line goes through three steps: a cheap substring gate (most engine lines are access logs and load chatter, and the
daemon parses every line), one normalising function that removes the wrapping (docker/compose and journald
prefixes, ANSI colours real or printed as text, Ray and vLLM process prefixes, vLLM's and uvicorn's level prefixes,
vLLM's JSON log format), then matchers anchored at the start of the bare message, so text quoted inside another
message (a prompt echoed by request logging) is not taken for a stats line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator

from caovan_kernels import contract

from .events import (
    MARKER_EVENTS,
    EngineConfig,
    EngineReady,
    Event,
    Fatal,
    FatalKind,
    LaunchDecisions,
    SpecDecode,
    Throughput,
)

# Every line that can become an event contains one of these; a line without any is skipped before any regex runs.
_GATE = re.compile(
    "throughput: |metrics: |LLM engine|startup complete|Caovan|caovan_mode=|MTP=|decisions: |Error|error|out of memory"
    "|out of resource|failed|encountered|died unexpectedly|Errno|cache blocks|KV cache|memory utilization"
    "|memory profiling|Watchdog|died|dead|Fatal|fatal|SIG|not running"
)

# --- normalisation -------------------------------------------------------------------------------------------------

# Real escape sequences, and SGR colour codes printed as text (`\x1b[0;36m`, `\033[..m`, `^[[..m`) or left bare
# (`[0;36m`) by tools that dropped the escape byte.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|(?:\\x1b|\\033|\\u001b|\\e|\^\[)\[[0-9;]*m"
    r"|\[\d{1,3}(?:;\d{1,3})*m"
)
# `docker compose logs`: `vllm-1  | `.
_COMPOSE = re.compile(r"[\w.-]+ +\| ")
_ISO_TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
# journald / syslog: `Jan 02 03:04:05 host vllm[1234]: ` (also journalctl -o short-iso / short-precise).
_SYSLOG = re.compile(
    r"(?:[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d+)?|" + _ISO_TIME + r") \S+ [^\s:\[]+(?:\[\d+\])?: "
)
# docker logs -t, kubectl logs --timestamps: `2026-01-02T03:04:05.123456789Z `; CI logs: `[2026-01-26T17:25:37Z] `.
_TIMESTAMP = re.compile(_ISO_TIME + " |\\[" + _ISO_TIME + "\\] ")
# vLLM's process prefixes and Ray's actor prefixes: `(EngineCore_DP0 pid=456) `,
# `(RayWorkerWrapper pid=123, ip=10.0.0.1) `, `(VllmWorker rank=0 pid=7) `; torch elastic's `[rank0]: `.
_PROCESS = re.compile(r"\([^()]*\bpid=\d+[^()]*\) ?|\[rank\d+\]: ?")
# vLLM's `INFO 11-30 12:28:09 [loggers.py:123] ` (older: `INFO 02-28 21:48:18 metrics.py:161] `).
_VLLM_LEVEL = re.compile(
    r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? \[?[^\]\s]+\] ?"
)
# uvicorn's `INFO:     Application startup complete.`
_UVICORN_LEVEL = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL): +")
# Ray's log deduplication suffix.
_RAY_REPEAT = re.compile(r" ?\[repeated \d+x across cluster\]$")

# Behind a prefix of unknown shape (a log viewer's timestamp, another server's stdout wrapper, a compose service
# name with other spacing), the record is searched for: vLLM's level record, else vLLM's process prefix, else
# uvicorn's level or Python logging's ` - LEVEL - ` form, else an exception line (a traceback's last line).
_VLLM_LEVEL_ANYWHERE = re.compile(r"(?<![\w-])" + _VLLM_LEVEL.pattern)
_PROCESS_ANYWHERE = re.compile(r"\((?:APIServer|EngineCore\w*|VllmWorker[\w-]*|Worker[\w-]*|RayWorker\w*"
                               r"|VllmWorkerProcess|LLMRayActor)\b[^()]*\bpid=\d+[^()]*\) ?")
_LEVEL_ANYWHERE = re.compile(r"(?:(?<=\s)|(?<=^))(DEBUG|INFO|WARNING|ERROR|CRITICAL): +"
                             r"| - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
_EXCEPTION_ANYWHERE = re.compile(r"(?:(?<=[\s|\]])|(?<=^))(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"
                                 r"(?:Error|Exception|OutOfResources): ")


def normalise_line(line: str) -> tuple[str | None, str]:
    """Return (level, message) of a raw log line: the level (`INFO`, `ERROR`, ...) where the line carries one, and the
    message without timestamps, colours and process prefixes. Leading indentation of the message is kept (traceback
    bodies are indented, the exception line is not)."""
    text = _ANSI.sub("", line.rstrip("\r\n"))
    pos = 0
    for prefix in (_COMPOSE, _SYSLOG, _TIMESTAMP, _COMPOSE):  # journald around compose, or compose around docker
        m = prefix.match(text, pos)
        if m:
            pos = m.end()
    if text.startswith("{", pos):
        json_message = _json_message(text[pos:])
        if json_message is not None:
            return json_message
    pos = _skip_processes(text, pos)
    level = None
    if m := _VLLM_LEVEL.match(text, pos) or _UVICORN_LEVEL.match(text, pos):
        level, pos = m.group(1), m.end()
    elif m := _VLLM_LEVEL_ANYWHERE.search(text, pos):
        level, pos = m.group(1), m.end()
    elif m := _PROCESS_ANYWHERE.search(text, pos):
        pos = _skip_processes(text, m.end())
        if m := _VLLM_LEVEL.match(text, pos) or _UVICORN_LEVEL.match(text, pos):
            level, pos = m.group(1), m.end()
    elif m := _LEVEL_ANYWHERE.search(text, pos):
        level, pos = m.group(1) or m.group(2), m.end()
    elif not text[pos:pos + 1].isspace() and (m := _EXCEPTION_ANYWHERE.search(text, pos)):
        pos = m.start()
    pos = _skip_processes(text, pos)
    return level, _RAY_REPEAT.sub("", text[pos:].rstrip())


def _skip_processes(text: str, pos: int) -> int:
    while m := _PROCESS.match(text, pos):
        pos = m.end()
    return pos


def _json_message(text: str) -> tuple[str | None, str] | None:
    """vLLM's JSON log format (VLLM_LOGGING_CONFIG with python-json-logger): the message and level fields."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("message"), str):
        return None
    level = record.get("levelname")
    return (level if isinstance(level, str) else None), record["message"]


# --- stats lines: `Key: value, Key: value, ...` ----------------------------------------------------------------------

_ENGINE_PREFIX = re.compile(r"Engine (\d+): |\d+ Engines Aggregated: ")
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?|nan)\s*(%|tokens/s|tokens|reqs)?\.?")  # no inf: output stays strict JSON


def _pairs(body: str) -> dict[str, str]:
    """`A: 1.0 tokens/s, B: 0.9, 0.8, C: 3` -> {"A": "1.0 tokens/s", "B": "0.9, 0.8", "C": "3"}.

    A comma-separated piece without `: ` continues the previous value (vLLM's per-position list); field order and
    unknown fields (Deferred, Preemptions, MM cache hit rate, ...) do not matter."""
    pairs: dict[str, str] = {}
    key = None
    for piece in body.rstrip(", ").split(", "):  # early V1 ended its spec line with ", "
        name, sep, value = piece.partition(": ")
        if sep:
            key = name.strip()
            pairs[key] = value
        elif key is not None and piece.strip():
            pairs[key] += ", " + piece
    return pairs


def _number(value: str | None) -> tuple[float | None, str] | None:
    """(number, unit) of `12.3 tokens/s`, `3.2%`, `7 reqs`, `0.651`, with `nan` as None; None where the value is not
    one number."""
    if value is None:
        return None
    m = _NUMBER.fullmatch(value.strip())
    if m is None:
        return None
    number = float(m.group(1))
    return (None if math.isnan(number) else number), m.group(2) or ""


def _float(value: str | None) -> float | None:
    parsed = _number(value)
    return None if parsed is None else parsed[0]


def _int(value: str | None) -> int | None:
    number = _float(value)
    return int(number) if number is not None and number.is_integer() else None


def _fraction(value: str | None) -> float | None:
    """An acceptance rate as 0..1: vLLM V1 prints a percentage (`65.1%`), V0 a fraction (`0.651`)."""
    parsed = _number(value)
    if parsed is None or parsed[0] is None:
        return None
    # Rounded so that 16.7% reads 0.167, not 0.16699999999999998 (the log prints one decimal of a percentage).
    return round(parsed[0] / 100.0, 9) if parsed[1] == "%" else parsed[0]


def _first(pairs: dict[str, str], *keys: str) -> str | None:
    for key in keys:
        if key in pairs:
            return pairs[key]
    return None


def _throughput(body: str, engine_index: int | None) -> Throughput | None:
    pairs = _pairs(body)
    # V1: "GPU KV cache usage" ("CPU KV cache usage" on CPU builds); V0 prints the GPU one first, then its swap space.
    kv_key = next((key for key in pairs if key.endswith("KV cache usage")), None)
    prompt_tps = _float(pairs.get("Avg prompt throughput"))
    generation_tps = _float(pairs.get("Avg generation throughput"))
    running = _int(pairs.get("Running"))
    waiting = _int(_first(pairs, "Waiting", "Pending"))  # V0 says Pending
    kv_pct = _float(pairs.get(kv_key) if kv_key else None)
    if prompt_tps is None or generation_tps is None or running is None or waiting is None or kv_pct is None:
        return None
    return Throughput(
        prompt_tps=prompt_tps,
        generation_tps=generation_tps,
        running=running,
        waiting=waiting,
        kv_cache_usage_pct=kv_pct,
        prefix_cache_hit_pct=_float(pairs.get("Prefix cache hit rate")),
        engine_index=engine_index,
    )


def _spec_decode(body: str) -> SpecDecode | None:
    pairs = _pairs(body)
    # V0 before 0.5.4 printed "Number of draft tokens tokens".
    accepted = _int(_first(pairs, "Accepted", "Number of accepted tokens"))
    drafted = _int(_first(pairs, "Drafted", "Number of draft tokens", "Number of draft tokens tokens"))
    if accepted is None or drafted is None:
        return None
    per_position = None
    if (listed := pairs.get("Per-position acceptance rate")) is not None:
        rates = [_float(rate) for rate in listed.split(", ")]
        if all(rate is not None for rate in rates):
            per_position = tuple(rate for rate in rates if rate is not None)
    return SpecDecode(
        accepted=accepted,
        drafted=drafted,
        acceptance_rate=_fraction(_first(pairs, "Avg Draft acceptance rate", "Draft acceptance rate")),
        mean_acceptance_length=_float(pairs.get("Mean acceptance length")),
        per_position=per_position,
        accepted_tps=_float(pairs.get("Accepted throughput")),
        drafted_tps=_float(pairs.get("Drafted throughput")),
    )


# --- startup line ----------------------------------------------------------------------------------------------------

# V1: `Initializing a V1 LLM engine (v0.32.0) with config: `; V0: `Initializing an LLM engine (v0.6.3) with config: `;
# before 0.4 without the version.
_ENGINE_CONFIG = re.compile(r"Initializing an? (?:V1 )?LLM engine(?: \(v([^)\s]+)\))? with config: ")
_MODEL = re.compile(r"""\bmodel=(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")""")
# `SpeculativeConfig(method='mtp', model=..., num_spec_tokens=3)` (V0: `SpeculativeConfig(draft_model=...,
# num_spec_tokens=5)`); a dict form would say num_speculative_tokens.
_SPEC_TOKENS = re.compile(r"""num_spec(?:ulative)?_tokens['"]?\s*[=:]\s*(\d+)""")
_CLOSING = {"(": ")", "{": "}", "[": "]"}


def _bracketed(text: str, start: int) -> str:
    """The balanced (...) / {...} / [...] group that opens at text[start], or up to the next `, ` for a plain value."""
    if text[start:start + 1] not in _CLOSING:
        end = text.find(", ", start)
        return text[start:] if end < 0 else text[start:end]
    stack = []
    for i in range(start, len(text)):
        ch = text[i]
        if ch in _CLOSING:
            stack.append(_CLOSING[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return text[start:i + 1]
    return text[start:]


def _engine_config(version: str | None, config: str) -> EngineConfig:
    model_match = _MODEL.search(config)
    model = None
    if model_match:
        model = model_match.group(1) if model_match.group(1) is not None else model_match.group(2)
    mtp_tokens = None
    spec_at = config.find("speculative_config=")
    if spec_at >= 0:
        value_at = spec_at + len("speculative_config=")
        value_start = config.find("(", value_at, value_at + 40)  # SpeculativeConfig( ... )
        spec = _bracketed(config, value_start if value_start >= 0 else value_at)
        if m := _SPEC_TOKENS.search(spec):
            mtp_tokens = int(m.group(1))
    return EngineConfig(version=version, mtp_tokens=mtp_tokens, model=model)


# --- the plugin's lines (caovan_kernels.contract) ------------------------------------------------------------------



def _plugin_line(message: str) -> Event | None:
    found = contract.read_marker(message)
    if found is None:
        return None
    marker, values = found
    return MARKER_EVENTS[marker.kind](**values)


# --- fatal lines -----------------------------------------------------------------------------------------------------

# The final line of a traceback (`torch.OutOfMemoryError: ...`, `triton.runtime.errors.OutOfResources: ...`).
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|OutOfResources)(?::|$)")
# First match wins: specific causes before the generic CUDA error and the start/dead consequences. The messages are
# vLLM's (v1/worker/utils.py, v1/core/kv_cache_utils.py, v1/engine/*, V0 worker), torch's, Triton's, NCCL's, uvicorn's.
_FATAL_KINDS: tuple[tuple[FatalKind, re.Pattern[str]], ...] = (
    ("oom", re.compile(r"OutOfMemoryError|(?:CUDA|HIP|XPU) out of memory|CUDA error: out of memory")),
    ("gpu_memory_insufficient", re.compile(
        r"less than desired GPU memory utilization|Error in memory profiling"
        r"|less than requested memory for kv"  # the CPU build's form (v1/worker/cpu_worker.py)
    )),
    ("kv_cache_insufficient", re.compile(
        r"larger than the available KV cache memory|No available memory for the cache blocks"
        r"|maximum number of tokens that can be stored in KV cache"
    )),
    ("triton_smem", re.compile(r"out of resource: shared memory")),
    ("nccl", re.compile(
        r"NCCL error|nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage)"
        r"|Watchdog caught collective operation timeout"
    )),
    ("port_in_use", re.compile(
        r"\[Errno (?:98|48|10048)\]|error while attempting to bind on address|ZMQError: Address already in use"
        r"|name: EADDRINUSE"
    )),
    ("cuda_error", re.compile(r"CUDA (?:driver )?error\b|\bcudaError\w+|DeferredCudaCallError")),
    ("engine_start_failed", re.compile(
        r"Engine core initialization failed|EngineCore failed to start|Engine process failed to start"
        r"|WorkerProc failed to start|Frontend process failed during engine core initialization"
        r"|RPCServer process died before responding to readiness probe"  # V0's frontend (0.6)
    )),
    # The engine, or one of its workers (a tensor-parallel rank, a Ray actor), died: V1's engine core and executor,
    # V0's MQLLMEngine and multiproc workers, and the fatal signals that kill them.
    ("engine_dead", re.compile(
        r"EngineDeadError|EngineCore encountered (?:an issue|a fatal error)|died unexpectedly"
        r"|Background loop has errored already|Engine loop has died|Engine loop is not running"
        r"|MQLLMEngine is already dead|Engine process \(pid \d+\) died|Worker VllmWorkerProcess pid \d+ died"
        r"|[Gg]ot fatal signal from worker processes|Fatal Python error: Segmentation fault"
        r"|\*\*\* SIG(?:SEGV|BUS|ABRT|ILL|FPE) received"
    )),
)


def _is_error(level: str | None, message: str) -> bool:
    """An error-level log line or an exception line. A warning that retries ("Address already in use. Retrying with a
    new port.") or a traceback's indented source line is no verdict."""
    if message[:1].isspace():
        return False
    return (
        level in ("ERROR", "CRITICAL")
        or _EXCEPTION_LINE.match(message) is not None
        or "Watchdog caught collective operation timeout" in message  # c10d's own `[E1130 ...]` format
    )


def _fatal(message: str) -> Fatal | None:
    for kind, pattern in _FATAL_KINDS:
        if pattern.search(message):
            return Fatal(fatal_kind=kind, message=message)
    return None


# --- public ----------------------------------------------------------------------------------------------------------


def parse_line(line: str) -> Event | None:
    """The event a vLLM log line carries, or None. Never raises on odd input: unknown shapes are simply not events."""
    if not _GATE.search(line):
        return None
    if contract.DECISIONS_PREFIX in line:  # its JSON runs to the end of the line, whatever wraps its start
        decisions = contract.read_decisions(line)
        if decisions is not None:
            return LaunchDecisions(profile=decisions["profile"], decisions=tuple(decisions["decisions"]),
                                   command=tuple(decisions["command"]))
    level, message = normalise_line(line)
    engine_index = None
    body = message
    if m := _ENGINE_PREFIX.match(message):
        engine_index = int(m.group(1)) if m.group(1) is not None else None
        body = message[m.end():]
    if body.startswith("Avg prompt throughput: "):
        return _throughput(body, engine_index)
    if body.startswith(("SpecDecoding metrics: ", "Speculative metrics: ")):
        return _spec_decode(body.partition(": ")[2])
    if m := _ENGINE_CONFIG.match(message):
        return _engine_config(m.group(1), message[m.end():])
    if message == "Application startup complete.":
        return EngineReady()
    # Markers are what the plugin reports at INFO; an error that merely mentions one (`ValueError: unknown
    # caovan_mode=x`) is not the marker.
    return _fatal(message) if _is_error(level, message) else _plugin_line(message)


def parse_lines(lines: Iterable[str]) -> Iterator[tuple[int, Event]]:
    """(1-based line number, event) for every line of `lines` that carries one."""
    for line_no, line in enumerate(lines, start=1):
        event = parse_line(line)
        if event is not None:
            yield line_no, event
