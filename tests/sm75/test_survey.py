"""The real Triton kernels of the installed vLLM (unified attention, fla GDN) and Caovan's, compiled for sm_75 the
way a 2080 Ti launches them, with TensorCore75 on (lab/tensorcore75_survey.py): which got mma and which
kept Triton's lowering and why, shared memory and spills from ptxas -v for sm_75, the register budget's .maxnreg
rebuild, and what the autotune pruning leaves to time. The table is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from lab.tensorcore75_survey import SM75_SHARED, Compiled, summary, table

ROOT = Path(__file__).resolve().parents[2]


def _surveys(tmp: Path, runs: dict[str, tuple[str, str]]) -> dict[str, list[Compiled]]:
    """{name: (groups, mode)} -> {name: records}; the runs are separate processes, run side by side (compiling is
    single-threaded, and each run's Triton driver is process-wide)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    started = {}
    for name, (groups, mode) in runs.items():
        out = tmp / f"{name}.json"
        command = [sys.executable, "-m", "lab.tensorcore75_survey", "--only", groups, "--mode", mode, "--json",
                   str(out)]
        started[name] = (subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                          env=env, cwd=ROOT), out)
    records = {}
    for name, (process, out) in started.items():
        _, stderr = process.communicate(timeout=1200)
        assert process.returncode == 0, f"survey {runs[name]} failed:\n{stderr[-4000:]}"
        records[name] = [Compiled(**r) for r in json.loads(out.read_text())]
    return records


@pytest.fixture(scope="module")
def surveyed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Compiled]]:
    runs = _surveys(tmp_path_factory.mktemp("survey"),
                    {"mma": ("attention,gdn,caovan", "force"), "fma": ("attention,caovan", "off")})
    print("\nWith TensorCore75 (sm_75, 2080 Ti launch limits):\n" + table(summary(runs["mma"])))
    print("\nTriton's own sm_75 lowering (attention, GDNCore):\n" + table(summary(runs["fma"])))
    return runs


def test_no_retarget_fell_back_and_ptx_matches_each_decision(surveyed) -> None:
    records = surveyed["mma"]
    assert not [r for r in records if r.decision == "kept:fallback"]
    assert all(r.turing_mma_in_ptx for r in records if r.retargeted)
    assert not any(r.turing_mma_in_ptx for r in records if not r.retargeted)


def test_what_gets_tensor_cores(surveyed) -> None:
    decided = defaultdict(set)
    for r in surveyed["mma"]:
        decided[r.kernel].add(r.decision)
    # fp16 dots throughout: vLLM's attention and the fla GDN prefill's matmul kernels
    for kernel in ("kernel_unified_attention", "chunk_scaled_dot_kkt_fwd_kernel", "recompute_w_u_fwd_kernel",
                   "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o"):
        assert decided[kernel] == {"mma:fp16"}, kernel
    # GDNCore's prefill sees TensorCore75 on and takes its Turing MMA form: fp16 operands in all three kernels
    for kernel in ("_chunk_wy_kernel", "_chunk_state_output_kernel", "_chunk_output_kernel"):
        assert decided[kernel] == {"mma:fp16"}, kernel
    # fla's 16x16 triangular inverse multiplies fp32
    assert decided["merge_16x16_to_64x64_inverse_kernel"] == {"kept:fp32_dot"}
    for kernel in ("reduce_segments", "chunk_local_cumsum_scalar_kernel", "fused_sigmoid_gating_delta_rule_update_kernel",
                   "_recurrent_kernel"):
        assert decided[kernel] == {"kept:no_dot"}, kernel


def test_retargeted_kernels_fit_turing_and_spill_no_more_than_fma(surveyed) -> None:
    retargeted = [r for r in surveyed["mma"] if r.retargeted]
    assert all(r.shared_bytes <= SM75_SHARED for r in retargeted)
    fma = {(r.group, r.kernel): r for r in surveyed["fma"]}
    for r in retargeted:
        if (r.group, r.kernel) in fma:
            assert r.spill_bytes <= fma[r.group, r.kernel].spill_bytes, (r, fma[r.group, r.kernel])


def test_every_kernel_has_a_launchable_configuration(surveyed) -> None:
    """Autotuners skip configurations that do not fit; each kernel needs one that does (64 KB, no spills)."""
    by_kernel = defaultdict(list)
    for r in surveyed["mma"]:
        by_kernel[r.kernel].append(r)
    assert [k for k, rs in by_kernel.items() if not any(r.fits for r in rs)] == []


def test_what_runs_is_spill_free_and_fits_turing(surveyed) -> None:
    """Every binary that runs with TensorCore75 (a kernel launched as is, or a configuration its autotuner times after
    the pruning) spills nothing per ptxas -v for sm_75, and uses at most 64 KB of shared memory."""
    runs = [r for r in surveyed["mma"] if r.timed]
    assert [(r.group, r.kernel, r.config) for r in runs if r.spill_bytes or r.shared_bytes > SM75_SHARED] == []
    # a compiled configuration goes untimed only because it spills (and another does not)
    assert [r for r in surveyed["mma"] if not r.timed and r.spill_bytes == 0] == []


def test_autotuners_time_one_of_each_num_stages_group_of_retargeted_kernels(surveyed) -> None:
    by_kernel = defaultdict(list)
    for r in surveyed["mma"]:
        if r.autotuner_configs:
            by_kernel[(r.group, r.kernel)].append(r)
    retargeted = {kernel for (_, kernel), rs in by_kernel.items() if all(r.retargeted for r in rs)}
    assert {"chunk_scaled_dot_kkt_fwd_kernel", "recompute_w_u_fwd_kernel",
            "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o"} <= retargeted
    for (group, kernel), rs in by_kernel.items():
        configs = [r.config for r in rs]  # constexprs and warps: what is left once num_stages is set aside
        if kernel in retargeted:
            # fla lists each configuration under three num_stages: only one of them was compiled, and timed
            assert len(rs) < rs[0].autotuner_configs and len(configs) == len(set(configs)), (group, kernel)
        else:
            # a kept kernel's num_stages change its code (Triton's own pipeliner): all compiled
            assert len(rs) == rs[0].autotuner_configs, (group, kernel)
    merge = by_kernel[("vllm gdn prefill", "merge_16x16_to_64x64_inverse_kernel")]
    assert len({r.config for r in merge}) < len(merge), "the fp32 kernel's num_stages twins must all be kept"


def test_attention_hd256_with_16_token_blocks_gets_the_registers_turing_leaves_it(surveyed) -> None:
    """ptxas alone stops at 168 registers and spills; the kernel's 40 KB of shared memory leave one block per SM,
    whose 65536 registers allow 255 per thread: rebuilt with .maxnreg 255, it spills nothing."""
    [r] = [r for r in surveyed["mma"] if (r.group, r.kernel) == ("vllm attention prefill hd256 bs16",
                                                                  "kernel_unified_attention")]
    assert r.shared_bytes == 40960 and r.maxnreg == 255
    assert r.spill_bytes == 0 and 168 < r.registers <= 255


def test_the_binary_triton_keeps_is_the_one_measured(surveyed) -> None:
    """The PTX Triton stores is the text its cubin was assembled from (the .maxnreg rebuild included), and the
    registers TensorCore75 read from that cubin are what ptxas -v reports; spills show as local memory there."""
    records = surveyed["mma"]
    assert [r.kernel for r in records if not r.ptx_is_cubin_source] == []
    assert [(r.kernel, r.registers, r.cubin_registers) for r in records if r.registers != r.cubin_registers] == []
    assert [r.kernel for r in records if r.spill_bytes and not r.cubin_local_bytes] == []
    assert any(r.spill_bytes for r in records), "no spilling binary: the comparison above proves nothing"
