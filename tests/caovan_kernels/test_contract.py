"""The engine-daemon contract round trip: every line the plugin and caovan-vllm-serve print, printed by the real
emitters in a fresh engine-like process, comes back through the daemon's parser as the same kind and values; every
format function, for any values, parses back to them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import caovan_kernels
from caovan_kernels import contract
from caovan_manager.logwatch import parse_line
from caovan_manager.logwatch.events import MARKER_EVENTS

QWEN36 = Path(__file__).parent / "profile" / "fixtures" / "qwen3_6_27b_awq"

# The plugin's real emitters, as vLLM runs them in each engine process (the CPU engine: stock kernels, so the GDNCore
# verdict is "not used"), then caovan-vllm-serve's decisions for a model on this machine.
EMITTERS = f"""
import json, sys, types
from caovan_kernels.vllm import activity, layer, plugin
from caovan_kernels.vllm.settings import EnginePluginSettings
from caovan_kernels import serve

plugin.register()
settings = EnginePluginSettings(mode="auto")
spec = types.SimpleNamespace(speculative_config=types.SimpleNamespace(method="mtp", num_speculative_tokens=3))
layer._announce(settings, spec, *layer._decide(settings, on_cuda=False))
for _ in range(10):
    activity.record("prefill")
activity.record("decode")
command, _ = serve.prepare({str(QWEN36)!r}, ["--max-model-len", "8192"], {{}})
sys.stderr.write("RESULT " + json.dumps(command) + "\\n")
"""

# Lines whose emitter runs only on a CUDA GPU (the decode-step watcher, the split-KV verdict), only when kernels compile for sm_75 (the
# TensorCore75 counts; their real emitter is read back in tests/caovan_kernels/tensorcore75) or only when vLLM builds
# an MTP drafter with caovan_draft_vocab set (read back from the CPU engine in tests/integration): their format
# functions are what the emitters call, tested below.
NOT_EMITTED_HERE = {contract.STEPS.kind, contract.TENSORCORE75_KERNELS.kind, contract.DRAFT_VOCAB_MARKER.kind,
                    contract.SPLIT_KV_MARKER.kind}


@pytest.fixture(scope="module")
def emitted() -> tuple[list[str], list[str]]:
    result = subprocess.run([sys.executable, "-c", EMITTERS], capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "CAOVAN_MODE": "auto", "HOME": str(Path.home())})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (result.stdout + result.stderr).splitlines()
    command = json.loads(next(line for line in lines if line.startswith("RESULT "))[len("RESULT "):])
    return lines, command


def test_every_emitted_marker_parses_back(emitted):
    lines, command = emitted
    events = [event for event in map(parse_line, lines) if event is not None]
    by_kind = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    expected_kinds = {m.kind for m in contract.MARKERS} - NOT_EMITTED_HERE | {contract.DECISIONS_KIND}
    assert set(by_kind) == expected_kinds, lines
    assert by_kind["plugin_banner"][0].version == caovan_kernels.__version__
    assert by_kind["plugin_mode"][0].mode == "auto"
    assert by_kind["plugin_mtp"][0].tokens == 3
    gdncore = by_kind["plugin_gdncore"][0]
    assert not gdncore.active and gdncore.reason.startswith("caovan_mode=auto: no CUDA GPU")
    assert [(e.prefill, e.decode) for e in by_kind["plugin_kernel_calls"]] == [(1, 0), (10, 0), (10, 1)]
    tensorcore75 = by_kind["tensorcore75_status"][0]
    assert not tensorcore75.active and tensorcore75.mode == "auto"
    assert tensorcore75.detail.startswith("no sm_75 compile target: no NVIDIA GPU")
    decisions = by_kind["launch_decisions"][0]
    assert list(decisions.command) == command and decisions.profile
    assert {"device", "dtype", "AutoSpec"} <= {d["name"] for d in decisions.decisions}


def test_every_marker_has_its_event_class_with_the_contracts_fields():
    for marker in contract.MARKERS:
        assert marker.kind in MARKER_EVENTS, marker.kind
    assert set(MARKER_EVENTS) == {m.kind for m in contract.MARKERS}


FORMATTED = [
    (contract.banner_line("1.0.0.dev3+g1a2b"), {"version": "1.0.0.dev3+g1a2b"}),
    (contract.mode_line("force"), {"mode": "force"}),
    (contract.mtp_line(4), {"tokens": 4}),
    (contract.gdncore_line(True, "caovan_mode=auto: GDNCore kernels on CUDA"),
     {"active": True, "reason": "caovan_mode=auto: GDNCore kernels on CUDA"}),
    (contract.REAL_PREFILL, {}),
    (contract.DISPATCH, {}),
    (contract.kernel_calls_line(100, None), {"prefill": 100, "decode": None}),
    (contract.device_steps_line(1000), {"steps": 1000}),
    (contract.tensorcore75_status_line(True, "3.6.0", "auto", "43 kernels on sm_75 tensor cores"),
     {"active": True, "triton": "3.6.0", "mode": "auto", "detail": "43 kernels on sm_75 tensor cores"}),
    (contract.tensorcore75_status_line(False, "none", "auto", "Triton is not importable: no retargeting"),
     {"active": False, "triton": "none", "mode": "auto", "detail": "Triton is not importable: no retargeting"}),
    # The line the TensorCore75 feature prints (its reasons listed in order whatever the dict's order).
    (contract.tensorcore75_count_line(43, {"no_dot": 21, "fp32_dot": 36}),
     {"total": 100, "retargeted": 43, "kept": 57, "kept_by_reason": {"fp32_dot": 36, "no_dot": 21}}),
    (contract.tensorcore75_count_line(1, {}), {"total": 1, "retargeted": 1, "kept": 0, "kept_by_reason": {}}),
    (contract.DraftVocabVerdict(True, 32801, 248320, "32768 ids by tokenizer order + 33 control tokens").line(),
     {"active": True, "hot": 32801, "vocab": 248320, "detail": "32768 ids by tokenizer order + 33 control tokens"}),
    (contract.DraftVocabVerdict(False, 0, 1024, "the lm_head is quantized").line(),
     {"active": False, "hot": 0, "vocab": 1024, "detail": "the lm_head is quantized"}),
    (contract.SplitKvVerdict(True, "MTP verify (2..4 query tokens) through the split-KV kernel").line(),
     {"active": True, "detail": "MTP verify (2..4 query tokens) through the split-KV kernel"}),
    (contract.SplitKvVerdict(False, "caovan_split_kv=off").line(), {"active": False, "detail": "caovan_split_kv=off"}),
]


@pytest.mark.parametrize("line,values", FORMATTED, ids=[line[:40] for line, _ in FORMATTED])
def test_format_functions_parse_back_behind_a_vllm_prefix(line, values):
    event = parse_line(f"(EngineCore_DP0 pid=7) INFO 12-01 09:00:00 [caovan] {line}")
    assert event is not None and event.values() == values, (line, event)


REASONS = st.from_regex(contract.REASON_KEY, fullmatch=True).filter(lambda r: len(r) < 24)


@given(st.booleans(), st.from_regex(r"[0-9a-z.+]{1,12}", fullmatch=True), st.sampled_from(contract.TENSORCORE75_MODES),
       st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80))
def test_tensorcore75_status_round_trip(active, triton, mode, detail):
    event = parse_line(contract.tensorcore75_status_line(active, triton, mode, detail))
    assert event.values() == {"active": active, "triton": triton, "mode": mode, "detail": " ".join(detail.split())}


@given(st.integers(0, 10**9), st.dictionaries(REASONS, st.integers(0, 10**9), max_size=6))
def test_tensorcore75_count_round_trip(retargeted, kept):
    event = parse_line(contract.tensorcore75_count_line(retargeted, kept))
    assert event.values() == {"total": retargeted + sum(kept.values()), "retargeted": retargeted,
                              "kept": sum(kept.values()), "kept_by_reason": kept}


@pytest.mark.parametrize("call", [
    lambda: contract.tensorcore75_count_line(1, {"FP32": 1}),
    lambda: contract.tensorcore75_count_line(1, {"no dot": 1}),
    lambda: contract.tensorcore75_count_line(-1, {}),
    lambda: contract.tensorcore75_status_line(True, "3.6 .0", "auto", "x"),
    lambda: contract.tensorcore75_status_line(True, "3.6.0", "sometimes", "x"),
])
def test_format_functions_refuse_what_would_not_parse_back(call):
    with pytest.raises(ValueError):
        call()


def test_the_tensorcore75_count_line_reads_as_specified():
    assert contract.tensorcore75_count_line(43, {"no_dot": 21, "fp32_dot": 36}) == (
        "[Caovan TensorCore75] kernels=100 retargeted=43 kept=57 (fp32_dot=36 no_dot=21)")
    assert contract.tensorcore75_count_line(5, {}) == "[Caovan TensorCore75] kernels=5 retargeted=5 kept=0 ()"
    assert contract.tensorcore75_status_line(False, "3.6.0", "auto", "no sm_75 GPU") == (
        "[Caovan TensorCore75] off triton=3.6.0 mode=auto: no sm_75 GPU")


def test_decisions_line_round_trip():
    line = contract.decisions_line([("dtype", "bfloat16", "the CPU path asserts bfloat16")],
                                   ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], False)
    event = parse_line(f"caovan-vllm-serve: {line}")
    assert event.values() == {"profile": False, "command": ["python", "-m", "vllm.entrypoints.openai.api_server",
                                                            "--model", "m"],
                              "decisions": [{"name": "dtype", "value": "bfloat16",
                                             "reason": "the CPU path asserts bfloat16"}]}
    assert parse_line(contract.DECISIONS_PREFIX + '{"decisions": "not a list", "command": []}') is None


def test_the_tensorcore75_autotune_line_reads_as_specified():
    line = contract.tensorcore75_autotune_line("chunk_fwd_kernel_o", 36, 10, 24, 2)
    assert line == ("[Caovan TensorCore75] autotune chunk_fwd_kernel_o: 36 configurations -> 10 timed (24 same code "
                    "under one stage, 2 spill on sm_75)")
    # a line for people: the daemon does not take it for the status or the kernel-count line
    assert contract.read_marker(line) is None
    assert parse_line(f"(EngineCore_DP0 pid=7) INFO 12-01 09:00:00 [caovan] {line}") is None


@pytest.mark.parametrize("counts", [(36, 10, 24, 1), (36, 12, 24, 2), (-1, 0, 0, -1), (3, -1, 4, 0)])
def test_the_autotune_line_refuses_counts_that_do_not_add_up(counts):
    with pytest.raises(ValueError, match="must be non-negative and add up"):
        contract.tensorcore75_autotune_line("k", *counts)


def test_the_autotune_line_names_its_kernel_in_one_word():
    with pytest.raises(ValueError, match="must be one word"):
        contract.tensorcore75_autotune_line("two words", 2, 1, 1, 0)
