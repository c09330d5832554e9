"""Plugin configuration: the seed's environment variables and --additional-config keys."""

import pytest

from caovan_kernels.vllm.layer import _decide
from caovan_kernels.vllm.settings import PluginConfigError, PluginSettings


def test_defaults_are_auto_not_required():
    assert PluginSettings.from_env({}) == PluginSettings(enabled=True, mode="auto", require_turbo3=False)


def test_environment_is_read_like_the_seed():
    s = PluginSettings.from_env({"CAOVAN_REQUIRE_TURBO3": "1", "CAOVAN_MODE": " Force "})
    assert s.require_turbo3 and s.mode == "force"
    assert not PluginSettings.from_env({"CAOVAN_ENABLE": "0"}).enabled


def test_additional_config_wins_over_environment():
    env = PluginSettings.from_env({"CAOVAN_MODE": "off"})
    s = env.with_additional_config({"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True})
    assert (s.enabled, s.mode, s.require_turbo3) == (True, "auto", True)
    assert env.with_additional_config({"unrelated": 1}) == env


@pytest.mark.parametrize("bad", ["turbo", "", "AUTO2"])
def test_unknown_mode_is_a_clear_error(bad):
    with pytest.raises(PluginConfigError, match="auto, off, force"):
        PluginSettings.from_env({"CAOVAN_MODE": bad})
    with pytest.raises(PluginConfigError, match="additional-config"):
        PluginSettings().with_additional_config({"caovan_mode": bad})


@pytest.mark.parametrize(
    ("mode", "on_cuda", "active"),
    [("auto", True, True), ("auto", False, False), ("off", True, False), ("force", False, True)],
)
def test_mode_decides_where_gdncore_runs(mode, on_cuda, active):
    decided, reason = _decide(PluginSettings(mode=mode), on_cuda)
    assert decided is active
    assert f"caovan_mode={mode}" in reason


def test_disabled_plugin_never_takes_over():
    assert _decide(PluginSettings(enabled=False, mode="force"), True)[0] is False
