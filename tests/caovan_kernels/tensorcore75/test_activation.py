"""TensorCore75's decision per process: mode, Triton version, compile target; one status line per change."""

from __future__ import annotations

import pytest

from caovan_kernels import tensorcore75
from caovan_kernels.errors import PluginConfigError


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch):
    lines: list[str] = []
    instance = tensorcore75.TensorCore75Hook(lines.append)
    instance.lines = lines
    monkeypatch.delenv("TRITON_OVERRIDE_ARCH", raising=False)
    yield instance
    instance.activate("off")  # detach from this process's Triton whatever the test did


@pytest.mark.parametrize("version", ["3.3.1", "3.2.0", "4.0.0", "3.10.0"])
def test_triton_outside_the_tested_set_is_left_alone(hook, monkeypatch, version) -> None:
    monkeypatch.setattr(tensorcore75, "_triton_version", lambda: version)
    status = hook.activate("force")
    assert not status.active
    assert hook.lines == [f"[Caovan TensorCore75] off triton={version} mode=force: Triton {version} is outside the "
                          "tested set (3.4, 3.5, 3.6, 3.7, 3.8, 3.9): left alone"]


def test_without_triton_it_says_so(hook, monkeypatch) -> None:
    monkeypatch.setattr(tensorcore75, "_triton_version", lambda: None)
    assert hook.activate("auto").line() == "[Caovan TensorCore75] off triton=none mode=auto: Triton is not importable"


def test_auto_needs_an_sm75_compile_target(hook, monkeypatch) -> None:
    status = hook.activate("auto")  # this machine: no GPU, no override
    assert not status.active and "no sm_75 compile target" in status.detail
    monkeypatch.setenv("TRITON_OVERRIDE_ARCH", "sm90")
    assert "TRITON_OVERRIDE_ARCH=sm90" in hook.activate("auto").detail
    monkeypatch.setenv("TRITON_OVERRIDE_ARCH", "sm75")  # the Turing proxy
    status = hook.activate("auto")
    assert status.active and "TRITON_OVERRIDE_ARCH=sm75" in status.detail and "m16n8k8" in status.detail


def test_off_and_force(hook) -> None:
    assert not hook.activate("off").active
    assert hook.activate("force").active
    assert [line.split(":")[0] for line in hook.lines] == [
        "[Caovan TensorCore75] off triton=3.6.0 mode=off", "[Caovan TensorCore75] ACTIVE triton=3.6.0 mode=force"]


def test_status_line_only_when_the_decision_changes(hook) -> None:
    hook.activate("force")
    hook.activate(" FORCE ")
    assert len(hook.lines) == 1


@pytest.mark.parametrize("bad", ["on", "", "true", "mma"])
def test_unknown_mode_is_a_plugin_config_error(hook, bad) -> None:
    with pytest.raises(PluginConfigError, match="use auto .* off .* or force"):
        hook.activate(bad)


def test_every_line_it_prints_is_read_back_by_the_contract(hook, monkeypatch) -> None:
    """The real emitters (status and census) against the daemon's reading of them (caovan_kernels/contract.py)."""
    from caovan_kernels import contract
    from caovan_kernels.tensorcore75.pipeline import METADATA_KEY

    hook.activate("off")
    hook.activate("force")
    for i, decision in enumerate(["mma:fp16"] * 4 + ["kept:fp32_dot"] * 5 + ["kept:no_dot"]):
        hook.census.record({METADATA_KEY: decision, "name": f"k{i}"})
    read = [contract.read_marker(line) for line in hook.lines]
    assert [marker.kind for marker, _ in read] == [
        "tensorcore75_status", "tensorcore75_status", "tensorcore75_kernels", "tensorcore75_kernels"]
    assert [v["active"] for m, v in read if m.kind == "tensorcore75_status"] == [False, True]
    assert read[-1][1] == {"total": 10, "retargeted": 4, "kept": 6, "kept_by_reason": {"fp32_dot": 5, "no_dot": 1}}


def test_the_autotune_pruning_is_attached_only_while_active(hook) -> None:
    from triton.runtime.autotuner import Autotuner

    tritons = Autotuner.prune_configs
    hook.activate("force")
    assert Autotuner.prune_configs is not tritons
    hook.activate("off")
    assert Autotuner.prune_configs is tritons
