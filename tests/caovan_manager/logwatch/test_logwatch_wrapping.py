"""Real logs arrive wrapped: docker and journald timestamps, ANSI colours (real or printed as text), Ray and vLLM
process prefixes, vLLM's JSON log format. The same line must give the same event under every wrapping."""

import json

import pytest

from caovan_manager.logwatch import (
    EngineReady,
    Fatal,
    SpecDecode,
    Throughput,
    parse_line,
)
from caovan_manager.logwatch.parser import normalise_line

STATS = (
    "Engine 002: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 3.2%, Prefix cache hit rate: 0.0%"
)
STATS_EVENT = Throughput(12.3, 45.6, 1, 0, 3.2, 0.0, 2)
VLLM_PREFIX = "INFO 11-30 12:28:09 [loggers.py:123] "

WRAPPINGS = {
    "bare": "{}",
    "vllm level": VLLM_PREFIX + "{}",
    "vllm level, V0 file form": "INFO 11-30 12:28:09 metrics.py:449] {}",
    "vllm level, DEBUG relpath": "INFO 11-30 12:28:09 [vllm/v1/metrics/loggers.py:123] {}",
    "api server": "(APIServer pid=789) " + VLLM_PREFIX + "{}",
    "engine core dp": "(EngineCore_DP0 pid=456) " + VLLM_PREFIX + "{}",
    "ray actor": "(RayWorkerWrapper pid=123, ip=10.0.0.1) " + VLLM_PREFIX + "{}",
    "ray actor, dedup suffix": "(RayWorkerWrapper pid=123, ip=10.0.0.1) " + VLLM_PREFIX + "{} [repeated 3x across "
                               "cluster]",
    "worker rank": "(VllmWorker rank=0 pid=7) " + VLLM_PREFIX + "{}",
    "docker": "2026-01-02T03:04:05.123456789Z (APIServer pid=789) " + VLLM_PREFIX + "{}",
    "docker, offset": "2026-01-02T03:04:05.123+01:00 " + VLLM_PREFIX + "{}",
    "ci bracketed": "[2026-01-26T17:25:37Z] (APIServer pid=789) " + VLLM_PREFIX + "{}",
    "compose": "vllm-1  | (APIServer pid=789) " + VLLM_PREFIX + "{}",
    "compose + docker": "vllm-1  | 2026-01-02T03:04:05.123456789Z " + VLLM_PREFIX + "{}",
    "journald": "Jan 02 03:04:05 gpu-box vllm[1234]: (APIServer pid=789) " + VLLM_PREFIX + "{}",
    "journald, day < 10": "Jan  2 03:04:05 gpu-box caovan-vllm-serve[1234]: " + VLLM_PREFIX + "{}",
    "journald short-iso": "2026-01-02T03:04:05+0000 gpu-box vllm[1234]: " + VLLM_PREFIX + "{}",
    "journald short-precise": "Jan 02 03:04:05.123456 gpu-box vllm[1234]: " + VLLM_PREFIX + "{}",
    # vLLM's ColoredFormatter (vllm/logging_utils/formatter.py), real escape bytes.
    "ansi": "\x1b[0;36m(APIServer pid=789)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-30 12:28:09\x1b[0m "
            "\x1b[90m[loggers.py:123]\x1b[0m {}",
    # The same printed as text by tools that escape control bytes, or with the escape byte dropped.
    "ansi as \\x1b text": "\\x1b[0;36m(APIServer pid=789)\\x1b[0;0m \\x1b[32mINFO\\x1b[0m \\x1b[90m11-30 12:28:09"
                         "\\x1b[0m \\x1b[90m[loggers.py:123]\\x1b[0m {}",
    "ansi as \\033 text": "\\033[0;36m(APIServer pid=789)\\033[0;0m \\033[32mINFO\\033[0m 11-30 12:28:09 "
                         "[loggers.py:123] {}",
    "ansi caret": "^[[0;36m(APIServer pid=789)^[[0;0m ^[[32mINFO^[[0m ^[[90m11-30 12:28:09^[[0m "
                  "^[[90m[loggers.py:123]^[[0m {}",
    "ansi bare": "[0;36m(APIServer pid=789)[0;0m [32mINFO[0m [90m11-30 12:28:09[0m [90m[loggers.py:123][0m {}",
    "docker + ansi + ray": "2026-01-02T03:04:05.123456789Z \x1b[36m(RayWorkerWrapper pid=123, ip=10.0.0.1)\x1b[0m "
                           + VLLM_PREFIX + "{}",
    "crlf": VLLM_PREFIX + "{}\r\n",
    # Prefixes of unknown shape, before which the vLLM record is searched for.
    "compose, other width": "vllm-server-on-arc  | (APIServer pid=789) " + VLLM_PREFIX + "{}",
    "journald around compose": "Jan 02 03:04:05 gpu-box dockerd[99]: vllm-1  | " + VLLM_PREFIX + "{}",
    "containerd CRI log": "2026-01-02T03:04:05.123456789Z stdout F " + VLLM_PREFIX + "{}",
    "log viewer, pipe": "2026-01-02 03:04:05.123 | INFO | " + VLLM_PREFIX + "{}",
    "sidecar stdout wrapper": "[VllmSidecar kooEr8Cc]: 2026-01-02T03:04:05.672Z 1 stdout: " + VLLM_PREFIX + "{}",
    "bracketed tag": "[vllm] " + VLLM_PREFIX + "{}",
    "process after a wrapper": "worker-3 => (EngineCore_DP0 pid=456) " + VLLM_PREFIX + "{}",
}


@pytest.mark.parametrize("wrapping", WRAPPINGS.values(), ids=list(WRAPPINGS))
def test_stats_line_under_every_wrapping(wrapping):
    assert parse_line(wrapping.format(STATS)) == STATS_EVENT


@pytest.mark.parametrize("wrapping", WRAPPINGS.values(), ids=list(WRAPPINGS))
def test_spec_line_under_every_wrapping(wrapping):
    line = (
        "SpecDecoding metrics: Mean acceptance length: 3.94, Accepted throughput: 12.00 tokens/s, Drafted throughput: "
        "12.18 tokens/s, Accepted: 120 tokens, Drafted: 122 tokens, Per-position acceptance rate: 0.984, 0.967, 0.950, "
        "Avg Draft acceptance rate: 98.4%"
    )
    assert parse_line(wrapping.format(line)) == SpecDecode(0.984, 3.94, 120, 122, (0.984, 0.967, 0.95), 12.0, 12.18)


@pytest.mark.parametrize("wrapping", WRAPPINGS.values(), ids=list(WRAPPINGS))
def test_fatal_line_under_every_wrapping(wrapping):
    line = wrapping.format("OSError: [Errno 98] Address already in use")
    assert parse_line(line) == Fatal("port_in_use", "OSError: [Errno 98] Address already in use")


@pytest.mark.parametrize(
    "line",
    [
        "INFO:     Application startup complete.",
        "(APIServer pid=789) INFO:     Application startup complete.",
        "\x1b[32mINFO\x1b[0m:     Application startup complete.",
        "Jan 02 03:04:05 gpu-box vllm[1234]: INFO:     Application startup complete.",
    ],
)
def test_uvicorn_lines_under_wrapping(line):
    assert parse_line(line) == EngineReady()


def test_vllm_json_log_format():
    # VLLM_LOGGING_CONFIG with python-json-logger and vLLM's JSON_FORMAT fields.
    record = {"asctime": "2026-01-02 03:04:05,123", "levelname": "INFO", "name": "vllm.v1.metrics.loggers",
              "processName": "MainProcess", "process": 1, "message": STATS}
    assert parse_line(json.dumps(record)) == STATS_EVENT
    error = dict(record, levelname="ERROR", message="EngineCore failed to start.")
    assert parse_line(json.dumps(error)) == Fatal("engine_start_failed", "EngineCore failed to start.")
    assert parse_line('{"message": 3, "text": "Avg prompt throughput: 1 tokens/s"}') is None
    assert parse_line('{not json "Avg prompt throughput: 1"') is None


def test_normalise_keeps_level_and_traceback_indentation():
    assert normalise_line("(EngineCore pid=5) ERROR 11-30 12:00:00 [core.py:708]     raise e\n") == (
        "ERROR", "    raise e"
    )
    assert normalise_line("[rank0]:   File \"x.py\", line 1, in f") == (None, "  File \"x.py\", line 1, in f")
    assert normalise_line("plain text") == (None, "plain text")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "\x1b[",
        "(((((((((((( pid=1",
        "Jan 02 03:04:05",
        "2026-01-02T03:04:05Z",
        "(APIServer pid=1) ",
        "INFO 11-30 12:28:09 [loggers.py:123]",
        "Engine 000: ",
        "Engine 999999999999999999999: Avg prompt throughput: 1.0 tokens/s",
        "\udcff\udcfe invalid surrogates Avg prompt throughput: \x00\x00",
        "Avg prompt throughput: " + "9" * 5000 + " tokens/s",
        "SpecDecoding metrics: Per-position acceptance rate: " + ", ".join(["0.5"] * 5000),
        "x" * 100_000 + " Error",
    ],
)
def test_odd_input_never_raises(line):
    parse_line(line)  # must not raise; whether an event results is not the point here
