"""How the doctor reports what the plugin's hooks return. The real hooks (caovan_kernels.vllm.seams,
caovan_kernels.gdn.selftest) cannot be made to fail on demand, so these tests install named stand-ins for them."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass

import pytest

from caovan_kernels.doctor import CheckStatus, run_doctor
from caovan_kernels.doctor.vllm_checks import SEAMS_MODULE, SELFTEST_MODULE


def _stand_in(monkeypatch, name: str, **attrs) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


@dataclass
class SeamResult:
    name: str
    status: str
    reason: str


def test_seams_pass_and_skip_are_reported_one_by_one(monkeypatch):
    results = [SeamResult("qwen_gated_delta_net_attention (register_oot)", "PASS", "found in vllm 0.32"),
               SeamResult("gated_delta_net_attention (0.21)", "SKIP", "module not in this vLLM")]
    _stand_in(monkeypatch, SEAMS_MODULE, check_seams=lambda: results)
    checks = {c.name: c for c in run_doctor(only=["gdn-seams"]).checks}
    assert checks["GDN seam qwen_gated_delta_net_attention (register_oot)"].status is CheckStatus.PASS
    assert checks["GDN seam gated_delta_net_attention (0.21)"].detail == "module not in this vLLM"
    assert checks["GDN interface"].status is CheckStatus.PASS


def test_no_seam_taken_is_a_warning_with_the_require_hint(monkeypatch):
    _stand_in(monkeypatch, SEAMS_MODULE, check_seams=lambda: [SeamResult("x", "SKIP", "absent")])
    interface = {c.name: c for c in run_doctor(only=["gdn-seams"]).checks}["GDN interface"]
    assert interface.status is CheckStatus.WARN and "CAOVAN_REQUIRE_TURBO3=1" in interface.fix


@pytest.mark.parametrize("outcome, status, detail", [
    ((True, "max |err| 2e-6 vs fp64 oracle"), CheckStatus.PASS, "max |err| 2e-6 vs fp64 oracle"),
    ((False, "max |err| 3e-2 > 1e-3"), CheckStatus.FAIL, "max |err| 3e-2 > 1e-3"),
    (RuntimeError("Triton interpreter exploded"), CheckStatus.FAIL,
     "crashed: RuntimeError: Triton interpreter exploded"),
])
def test_selftest_result_per_device(monkeypatch, outcome, status, detail):
    calls = []

    def run(device):
        calls.append(device)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    _stand_in(monkeypatch, SELFTEST_MODULE, run=run)
    report = run_doctor(only=["gdn-selftest"])
    (check,) = report.checks
    assert calls == ["cpu"] and check.name == "GDNCore self-test on cpu"
    assert (check.status, check.detail) == (status, detail)
    assert report.exit_code == (1 if status is CheckStatus.FAIL else 0)
