"""The Turing proxy's switches, without a GPU: what it sets, what it presents, and that it undoes it all."""

from __future__ import annotations

import os

import pytest
import torch
from triton.runtime import driver

from caovan_kernels.errors import ProxyConfigError
from caovan_kernels.turing import proxy
from caovan_kernels.turing.device_view import RTX_2080_TI


def test_enable_presents_a_2080ti_and_the_sm75_compile_path_then_undoes_it(monkeypatch):
    monkeypatch.delenv("TRITON_OVERRIDE_ARCH", raising=False)
    real_name, real_capability = torch.cuda.get_device_name, torch.cuda.get_device_capability
    previous_driver = driver._active
    disable = proxy.enable()
    assert driver._active is not previous_driver
    try:
        assert os.environ["TRITON_OVERRIDE_ARCH"] == "sm75"
        assert torch.cuda.get_device_name(0) == "NVIDIA GeForce RTX 2080 Ti"
        assert torch.cuda.get_device_capability() == (7, 5)
        # Triton's driver is created on first use, bound to the real capability query (not the view's)
        assert isinstance(driver._active, proxy._RealTargetDriver)
        assert driver._active._setup == (real_capability, RTX_2080_TI)
    finally:
        disable()
    assert driver._active is previous_driver
    assert "TRITON_OVERRIDE_ARCH" not in os.environ
    assert torch.cuda.get_device_name is real_name and torch.cuda.get_device_capability is real_capability


def test_the_view_reports_turing_launch_limits():
    props = RTX_2080_TI.triton_properties({"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536})
    assert props["max_shared_mem"] == 65536 and props["multiprocessor_count"] == 68
    assert props["max_num_regs"] == 65536  # what the view does not change stays the real device's


@pytest.mark.parametrize(("value", "expected"), [("", None), ("0", None), ("1", (True, True)), ("view", (True, True)),
                                               ("triton", (True, False)), ("arch", (False, False))])
def test_environment_switch(value, expected):
    assert proxy.requested({proxy.ENV: value}) == expected


def test_unknown_environment_value_is_a_clear_error():
    with pytest.raises(ProxyConfigError, match="use 1 .* triton .* arch .* or 0"):
        proxy.requested({proxy.ENV: "yes please"})
