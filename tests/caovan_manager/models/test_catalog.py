"""The models table resolved: names and aliases, each engine's served names, GPUs and environment."""

from __future__ import annotations

import pytest

from caovan_manager.config import load_settings
from caovan_manager.engine.launch import EngineTarget, build_launch
from caovan_manager.errors import UnknownModel
from caovan_manager.models.catalog import build_catalog, without_served_name


def test_without_a_table_one_model_takes_every_request(tmp_path):
    settings = load_settings(state_dir=str(tmp_path))
    catalog = build_catalog(settings, target=EngineTarget("/m/qwen", ["--served-model-name", "qwen", "-tp", "2"]))
    assert not catalog.routed and catalog.names == ["qwen"]
    assert catalog.lookup("anything").name == "qwen" and catalog.lookup(None).name == "qwen"
    unnamed = build_catalog(settings, target=EngineTarget("/m/plain", []))
    assert unnamed.names == ["/m/plain"]  # vLLM's own served name: the model argument
    # vLLM takes several served names (it reports the first); each is one of the model's names here too.
    several = build_catalog(settings, target=EngineTarget("/m/q", ["--served-model-name", "q", "qwen", "-tp", "2"]))
    assert several.names == ["q"] and several.primary.aliases == ("qwen",) and several.get_named("qwen").name == "q"
    assert without_served_name(["--served-model-name", "q", "qwen", "-tp", "2", "--served-model-name=x"]) == [
        "-tp", "2"]


def test_a_table_routes_by_name_and_alias_and_names_each_engine(tmp_path):
    settings = load_settings(state_dir=str(tmp_path), engine={"args": ["--enforce-eager"]}, models={
        "coder": {"model": "org/coder-7b", "gpus": [0], "aliases": ["code", "c"], "args": ["--max-model-len", "8192"],
                  "env": {"VLLM_LOGGING_LEVEL": "DEBUG"}},
        "chat": {"model": "org/chat-27b"}})
    catalog = build_catalog(settings)
    assert catalog.routed and catalog.names == ["coder", "chat"] and catalog.primary.name == "coder"
    coder = catalog.lookup("code")
    assert coder.name == "coder" and catalog.lookup("c") is coder
    assert coder.target.args == ["--enforce-eager", "--max-model-len", "8192", "--served-model-name", "coder", "code",
                                 "c"]
    with pytest.raises(UnknownModel, match="the model the request names is not served here; the configured models are: "
                                           "coder, chat"):
        catalog.lookup("gpt")
    spec = build_launch(settings, coder.target, tmp_path / "a.sock", tmp_path, None)
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0" and spec.env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    chat_spec = build_launch(settings, catalog.get_named("chat").target, tmp_path / "b.sock", tmp_path, None)
    assert "VLLM_LOGGING_LEVEL" not in chat_spec.env or chat_spec.env["VLLM_LOGGING_LEVEL"] != "DEBUG"


def test_an_entry_with_sleep_gets_vllms_sleep_mode_and_its_endpoints(tmp_path):
    settings = load_settings(state_dir=str(tmp_path), models={
        "chat": {"model": "/m/chat", "gpus": [0], "sleep": True}, "coder": {"model": "/m/coder", "gpus": [0]}})
    chat, coder = build_catalog(settings)
    assert chat.sleep and not coder.sleep
    assert chat.target.args == ["--served-model-name", "chat", "--enable-sleep-mode"]
    sock = tmp_path / "engine.sock"
    assert build_launch(settings, chat.target, sock, tmp_path, None).env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enable-sleep-mode" not in coder.target.args
    assert "VLLM_SERVER_DEV_MODE" not in build_launch(settings, coder.target, sock, tmp_path, None).env


@pytest.mark.parametrize("first,second,shared", [
    ([0], [0], True), ([0], [1], False), ([0, 1], [1], True), (None, [1], True), (None, None, True)])
def test_models_share_a_gpu_when_their_lists_meet_or_one_takes_all(tmp_path, first, second, shared):
    settings = load_settings(state_dir=str(tmp_path), models={
        "x": {"model": "/m/x", "gpus": first}, "y": {"model": "/m/y", "gpus": second}})
    x, y = build_catalog(settings)
    assert x.overlaps(y) is shared and y.overlaps(x) is shared
