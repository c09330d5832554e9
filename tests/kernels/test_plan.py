"""The prefill's launch plan (gdn.plan): resolved once per key, the same forms and blocks on every target, and
caller's blocks that cannot launch refused, not rewritten."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from caovan_kernels.gdn import plan
from caovan_kernels.gdn.plan import (
    FMA,
    MMA_SYNC_WARPS2,
    TENSOR_CORES,
    TURING_MMA,
    DotPlan,
    PrefillBlocks,
    UnlaunchableBlocks,
    plan_for_target,
    prefill_blocks,
    prefill_plan,
    resolve,
)


def test_w_and_u_ahead_needs_the_plain_walk_with_kernel_3():
    tensor_cores = prefill_blocks(128, 128, TENSOR_CORES)
    with pytest.raises(ValueError, match="parallel_output=True, prefetch=False, got"):
        dataclasses.replace(tensor_cores, parallel_output=False, wu_ahead=True)
    with pytest.raises(ValueError, match="parallel_output=True, prefetch=False, got"):
        dataclasses.replace(prefill_blocks(128, 128, TURING_MMA), wu_ahead=True)


def test_prefetch_and_parallel_output_need_the_state_in_registers():
    with pytest.raises(ValueError, match="split_k == bk"):
        dataclasses.replace(prefill_blocks(256, 256, TURING_MMA), prefetch=True)
    with pytest.raises(ValueError, match="split_k == bk"):
        dataclasses.replace(prefill_blocks(128, 128, FMA), parallel_output=True)


def test_a_tensor_core_plan_takes_native_operands():
    with pytest.raises(ValueError, match="native=True"):
        DotPlan("ieee", native=False, form=TURING_MMA)
    with pytest.raises(ValueError, match="unknown GDN prefill form"):
        DotPlan("ieee", native=True, form="wmma")


@pytest.mark.parametrize("arch,dtype,dims,turing_mma,expected", [
    (None, torch.float16, (128, 128), True, DotPlan("ieee", True, FMA)),  # the interpreter: fp16 emulated exactly
    (None, torch.bfloat16, (128, 128), True, DotPlan("ieee", False, FMA)),  # ... bf16 not
    (90, torch.bfloat16, (128, 128), False, DotPlan("tf32", True, TENSOR_CORES)),
    (75, torch.float16, (128, 128), True, DotPlan("ieee", True, TURING_MMA)),
    (75, torch.float16, (256, 256), True, DotPlan("ieee", True, TURING_MMA)),
    (75, torch.float16, (128, 128), False, DotPlan("ieee", True, FMA)),  # TensorCore75 off
    (75, torch.float16, (100, 128), True, DotPlan("ieee", True, FMA)),  # a masked head dim spills in MMA form
    (75, torch.bfloat16, (128, 128), True, DotPlan("ieee", True, FMA)),  # Turing has no bf16 tensor cores
    (70, torch.float16, (128, 128), True, DotPlan("ieee", True, FMA)),  # TensorCore75 retargets sm_75 only
])
def test_plan_for_each_target(arch, dtype, dims, turing_mma, expected):
    assert plan_for_target(arch, dtype, *dims, turing_mma) == expected


# Qwen3.6's head dims (128) on each target, and a masked head dim (100) on sm_90, which wgmma cannot take
@pytest.mark.parametrize("arch,dtype,dims,turing_mma,expected", [
    (75, torch.float16, (128, 128), True,
     PrefillBlocks(16, 1, 128, 32, 128, 4, prefetch=True, parallel_output=True, bv3=128, warps3=8)),
    (75, torch.float16, (256, 256), True, PrefillBlocks(16, 1, 256, 16, 128, 8)),
    (75, torch.float16, (128, 128), False, PrefillBlocks(16, 8, 128, 16, 32, 8)),
    (90, torch.float16, (128, 128), False,
     PrefillBlocks(16, 1, 128, 32, 128, 4, parallel_output=True, bv3=128, warps3=4, wu_ahead=True)),
    (90, torch.float16, (100, 64), False,
     PrefillBlocks(16, 1, 128, 32, 128, MMA_SYNC_WARPS2, parallel_output=True, bv3=64, warps3=4)),
    (None, torch.float16, (128, 128), False, PrefillBlocks(16, 8, 128, 16, 32, 8)),
])
def test_each_target_gets_its_own_blocks(arch, dtype, dims, turing_mma, expected):
    assert resolve(arch, dtype, *dims, turing_mma).blocks == expected


def test_a_plan_is_resolved_once_per_key(monkeypatch):
    monkeypatch.setattr(plan, "_plans", {})
    calls = []
    monkeypatch.setattr(plan, "resolve", lambda *args: calls.append(args) or resolve(*args))
    cpu = torch.device("cpu")
    first = prefill_plan(cpu, torch.float16, 128, 128, False)
    assert all(prefill_plan(cpu, torch.float16, 128, 128, False) is first for _ in range(3))
    assert len(calls) == 1
    assert prefill_plan(cpu, torch.float16, 128, 128, True) is not first  # TensorCore75's state is part of the key
    assert len(calls) == 2


def test_blocks_that_cannot_launch_are_refused_not_rewritten():
    eight = dataclasses.replace(prefill_blocks(128, 128, TENSOR_CORES), warps2=8)
    with pytest.raises(UnlaunchableBlocks, match="at most 4 warps") as refused:
        resolve(90, torch.float16, 128, 128, False, blocks=eight)
    assert isinstance(refused.value, ValueError) and "leave blocks out" in str(refused.value)
    assert resolve(75, torch.float16, 128, 128, False, blocks=eight).blocks is eight
