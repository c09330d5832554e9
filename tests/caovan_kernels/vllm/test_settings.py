"""Plugin configuration: the plugin's environment variables and --additional-config keys."""

import pytest

from caovan_kernels.errors import PluginConfigError
from caovan_kernels.vllm import auto_choice
from caovan_kernels.vllm.layer import _decide
from caovan_kernels.vllm.settings import EnginePluginSettings


def test_defaults_are_auto_not_required():
    assert EnginePluginSettings.from_env({}) == EnginePluginSettings(enabled=True, mode="auto", require_turbo3=False)


def test_the_plugins_environment_variables_are_read_case_and_space_insensitively():
    s = EnginePluginSettings.from_env({"CAOVAN_REQUIRE_TURBO3": "1", "CAOVAN_MODE": " Force "})
    assert s.require_turbo3 and s.mode == "force"
    assert not EnginePluginSettings.from_env({"CAOVAN_ENABLE": "0"}).enabled


def test_additional_config_wins_over_environment():
    env = EnginePluginSettings.from_env({"CAOVAN_MODE": "off"})
    s = env.with_additional_config({"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True})
    assert (s.enabled, s.mode, s.require_turbo3) == (True, "auto", True)
    assert env.with_additional_config({"unrelated": 1}) == env


@pytest.mark.parametrize("bad", ["turbo", "", "AUTO2"])
def test_unknown_mode_is_a_clear_error(bad):
    with pytest.raises(PluginConfigError, match="auto, off, force"):
        EnginePluginSettings.from_env({"CAOVAN_MODE": bad})
    with pytest.raises(PluginConfigError, match="additional-config"):
        EnginePluginSettings().with_additional_config({"caovan_mode": bad})


FASTER = lambda: (True, "GDNCore measured faster here")  # noqa: E731 - auto's measured verdicts, as the GPU
SLOWER = lambda: (False, "stock measured faster here")  # noqa: E731


@pytest.mark.parametrize(
    ("mode", "on_cuda", "auto", "active"),
    [("auto", True, FASTER, True), ("auto", True, SLOWER, False), ("auto", False, FASTER, False),
     ("off", True, FASTER, False), ("force", False, SLOWER, True), ("force", True, SLOWER, True)],
)
def test_mode_decides_where_gdncore_runs(mode, on_cuda, auto, active):
    decided, reason = _decide(EnginePluginSettings(mode=mode), on_cuda, auto)
    assert decided is active
    assert f"caovan_mode={mode}" in reason
    if mode == "auto" and on_cuda:
        assert auto()[1] in reason


def test_require_turbo3_outranks_autos_speed_choice():
    decided, reason = _decide(EnginePluginSettings(mode="auto", require_turbo3=True), True, SLOWER)
    assert decided and "caovan_require_turbo3" in reason and "stock measured faster here" in reason


@pytest.mark.parametrize(("arch", "turing_mma", "triton", "gdncore", "where"), [
    (75, False, (3, 6), False, "sm_75 with Triton's FMA dots"),
    (75, True, (3, 6), True, "GDNCore kernels on sm_75 with TensorCore75, where they measured faster"),
    (75, False, (3, 3), False, "sm_75: GDNCore has no measurement"),  # Triton < 3.4 has Turing mma itself
    (90, False, (3, 6), True, "GDNCore kernels on sm_90, where they measured faster"),
    (86, False, (3, 6), False, "sm_86: GDNCore has no measurement"),
])
def test_auto_runs_gdncore_only_where_it_measured_faster(arch, turing_mma, triton, gdncore, where):
    ours, why = auto_choice.auto_choice(arch, turing_mma, triton)
    assert ours is gdncore and where in why
    assert ("GDNCore kernels" if gdncore else "stock vLLM GDN kernels") in why


def test_disabled_plugin_never_takes_over():
    assert _decide(EnginePluginSettings(enabled=False, mode="force"), True)[0] is False
