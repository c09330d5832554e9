"""TensorCore75 on the compile path of sm_75, without a GPU: which kernels get m16n8k8, which keep Triton's own
lowering, and that the two never meet in Triton's cache. Each scenario compiles in a child process (tc75_probe.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sm75.probe import run_probe

M16N8K8_F32 = "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"


@pytest.fixture(scope="module")
def decisions(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_probe("decisions", tmp_path_factory.mktemp("cache"))["result"]


@pytest.mark.parametrize(("probe", "instruction"), [
    ("fp16", M16N8K8_F32),
    ("fp16_acc16", "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16"),
    ("fp16_loop", M16N8K8_F32),
])
def test_fp16_dots_get_turing_mma(decisions: dict, probe: str, instruction: str) -> None:
    off, on = decisions["off"][probe], decisions["on"][probe]
    assert off["mma"] == [], "Triton's own sm_75 lowering should be FMA (otherwise there is nothing to fix)"
    assert on["decision"] == "mma:fp16"
    assert on["mma"] == [instruction]  # and ptxas for sm_75 accepted it: the compile produced a cubin


def test_int8_dots_get_m8n8k16(decisions: dict, tmp_path: Path) -> None:
    # Triton's own sm_75 lowering cannot compile an int8 dot at all (its FMA path extends i8 as a float)
    assert "error" in decisions["off"]["int8"]
    assert decisions["on"]["int8"]["decision"] == "mma:int8"
    assert decisions["on"]["int8"]["mma"] == ["mma.sync.aligned.m8n8k16.row.col.satfinite.s32.s8.s8.s32"]
    assert "error" in run_probe("int8-off", tmp_path)["result"], "with int8 off the kernel is Triton's again"


@pytest.mark.parametrize(("probe", "reason"), [
    ("bf16", "bf16_dot"), ("fp32_tf32", "fp32_dot"), ("fp32_ieee", "fp32_dot"), ("mixed", "fp32_dot"),
    ("no_dot", "no_dot"),
])
def test_kernels_turing_cannot_take_keep_tritons_lowering_unchanged(decisions: dict, probe: str, reason: str) -> None:
    off, on = decisions["off"][probe], decisions["on"][probe]
    assert on["decision"] == f"kept:{reason}"
    assert on["mma"] == []
    assert on["ptx_body"] == off["ptx_body"], "a kept kernel must compile exactly as without the hook"
    assert on["cubin_sha256"] == off["cubin_sha256"], "a kept kernel's binary must be Triton's own"


def test_every_sm75_binary_carries_its_registers_and_local_memory(decisions: dict) -> None:
    """Retargeted and kept alike (the autotune pruning reads them); without the hook there are none."""
    on = {p: r for p, r in decisions["on"].items() if "error" not in r}
    assert set(on) == set(decisions["on"])
    assert all(r["registers"] > 0 and r["local_bytes"] >= 0 for r in on.values()), on
    assert all(r.get("registers") is None for r in decisions["off"].values())


def test_a_kernel_compiled_before_the_hook_is_not_mixed_up(tmp_path: Path) -> None:
    result = run_probe("before-hook", tmp_path)["result"]
    first, hooked, again = result["first"], result["hooked"], result["again"]
    assert first["decision"] is None and first["mma"] == []
    # the hook does not find the FMA binary compiled before it, and builds its own
    assert hooked["cache_hit"] is False and hooked["mma"] == [M16N8K8_F32]
    # with the hook off again, the FMA binary is found where it was, not the mma one
    assert again["cache_hit"] is True and again["mma"] == [] and again["ptx_body"] == first["ptx_body"]


def test_modes_and_hook_versions_never_share_a_cache_entry(tmp_path: Path) -> None:
    """Separate processes on one cache folder, as engines restarted with another caovan_turing_mma would be."""
    written = run_probe("cache-write", tmp_path)["result"]
    assert written["cache_hit"] is False and written["mma"] == [M16N8K8_F32]
    off = run_probe("cache-off", tmp_path)["result"]
    assert off["cache_hit"] is False and off["mma"] == [], "hook off reused the hooked binary"
    other = run_probe("cache-other-tag", tmp_path)["result"]
    assert other["cache_hit"] is False, "another hook version reused this version's binary"
    again = run_probe("cache-read", tmp_path)["result"]
    assert again["cache_hit"] is True and again["mma"] == [M16N8K8_F32], "the same hook version must find its own"


def test_census_counts_every_kernel_with_reasons(tmp_path: Path) -> None:
    out = run_probe("census", tmp_path)
    # 9 probes compiled, then a cache hit of the first: decisions travel with cached binaries
    assert out["result"] == {"retargeted": 5, "kept": {"bf16_dot": 1, "fp32_dot": 3, "no_dot": 1}}
    lines = [line for line in out["log"] if "kernels=" in line]
    assert lines == [
        "[Caovan TensorCore75] kernels=1 retargeted=1 kept=0 ()",
        "[Caovan TensorCore75] kernels=10 retargeted=5 kept=5 (bf16_dot=1 fp32_dot=3 no_dot=1)",
    ]
    assert out["log"][0].startswith("[Caovan TensorCore75] ACTIVE triton=")


def test_a_hook_installed_earlier_keeps_working(tmp_path: Path) -> None:
    result = run_probe("chain", tmp_path)["result"]
    assert result["seen"] == ["dot_kernel:KernelCompile.ttgir"], "the earlier hook must run, and see our stage"
    assert result["decision"] == "mma:fp16" and result["mma"] == [M16N8K8_F32]
    assert result["restored"], "turning TensorCore75 off must leave the earlier hook in place"


def test_a_failed_retarget_falls_back_to_tritons_lowering(tmp_path: Path) -> None:
    result = run_probe("fallback", tmp_path)["result"]
    assert result["decision"] == "kept:fallback" and result["mma"] == []
    assert any("dot_kernel: retargeting refused (16384 bytes of shared memory" in line for line in result["log"])


@pytest.mark.parametrize(("scenario", "where", "recorded"), [
    ("register-step-fails", "in the .maxnreg rebuild", True),
    ("binary-unreadable", "reading the binary", False),
])
def test_a_failed_register_step_keeps_the_binary_ptxas_built(tmp_path: Path, scenario: str, where: str,
                                                             recorded: bool) -> None:
    out = run_probe(scenario, tmp_path)
    fp16, kept = out["result"]["fp16"], out["result"]["no_dot"]
    assert fp16["decision"] == "mma:fp16" and fp16["mma"] == [M16N8K8_F32], "still retargeted, still compiled"
    assert kept["decision"] == "kept:no_dot"
    # the first binary's registers when it could be read; none when not (then its autotuner is not pruned)
    assert (fp16["registers"] is not None) == recorded
    skipped = [line for line in out["log"] if "register step skipped" in line]
    kept_as_built = "the binary ptxas built without .maxnreg is kept"
    assert skipped and all(where in line and line.endswith(kept_as_built) for line in skipped)
    assert skipped[0].startswith(f"[Caovan TensorCore75] dot_kernel: register step skipped (RuntimeError: {scenario}")


def test_the_stored_ptx_is_the_source_of_the_stored_cubin(tmp_path: Path) -> None:
    """A retargeted kernel is assembled in its ptx stage; the cubin stage hands that binary on only for the very
    text assembled: a hook that edits the PTX after ours (here: .maxnreg 40) gets a cubin built from its edit."""
    result = run_probe("ptx-rewritten", tmp_path)["result"]
    normal, rewritten = result["normal"], result["rewritten"]
    assert normal["decision"] == rewritten["decision"] == "mma:fp16"
    assert normal["cubin_from_stored_ptx"] and rewritten["cubin_from_stored_ptx"]
    assert ".maxnreg 40" in rewritten["ptx_body"] and rewritten["registers"] <= 40
