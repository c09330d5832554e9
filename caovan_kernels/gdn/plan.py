"""The chunked prefill's launch plan: how its products run and its kernels' launch shapes, resolved once.

As vLLM's CustomOp picks its forward once, a prefill call looks its plan up by (device, input dtype, head dims,
whether TensorCore75 retargets this process's fp16 dots) and launches with it; the choice is made here and nowhere
else. A caller may hand in its own dot plan or blocks (the tests run the tensor-core forms through the interpreter,
the benchmarks sweep launch shapes); blocks that cannot run on the compile target are refused, never rewritten.
The figures behind each choice: docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from caovan_kernels.errors import UnlaunchableBlocks
from caovan_kernels.gdn._common import SUB, compile_arch, head_block
from caovan_kernels.tensorcore75 import TURING

# Forms of the chunked prefill (operand types and block sizes):
FMA = "fma"  # Triton's FMA dots (sm_75 without TensorCore75, the interpreter): small blocks, the inverse in fp32
TURING_MMA = "turing_mma"  # sm_75 with TensorCore75: fp16 operands, blocks that keep m16n8k8 free of spills
TENSOR_CORES = "tensor_cores"  # sm_80+: operands in the input dtype (tf32 for fp32)
FORMS = (FMA, TURING_MMA, TENSOR_CORES)

# Compiled for sm_90, Triton 3.6's code for kernel 2 (checked with compute-sanitizer): at 8 warps (two warpgroups
# sharing its 64-row wgmma products) it reads shared memory out of range; at 4 it is correct only when its key rows
# are copied to shared memory asynchronously (16-byte aligned rows, loads beside their first use): with a head dim
# of 100 in fp16, or with prefetch, its products come out wrong. Below 4 warps Triton emits mma.sync instead of
# wgmma, which is right in all of those cases.
MAX_WGMMA_WARPS2 = 4
MMA_SYNC_WARPS2 = 2


@dataclass(frozen=True)
class DotPlan:
    """How the chunked prefill's products run: tl.dot's input_precision, whether operands take the input dtype
    (fp32 accumulation, what tensor cores take) and the form (above)."""

    precision: str
    native: bool
    form: str

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"unknown GDN prefill form {self.form!r}; one of {', '.join(FORMS)}")
        if self.form != FMA and not self.native:
            raise ValueError(f"the {self.form} form takes its operands in the input dtype (native=True)")


def plan_for_target(arch: int | None, dtype: torch.dtype, dim_k: int, dim_v: int, turing_mma: bool) -> DotPlan:
    """The plan for a compile target (None: the CPU interpreter), input dtype and head dims; turing_mma: whether
    TensorCore75 retargets this process's fp16 dots.

    sm_75 takes the Turing MMA form for fp16 at power-of-two head dims only: those are the configurations
    sm75_fit finds free of spills (a masked head dim such as 100 spills in both kernels, so it keeps the FMA form,
    as do bf16 and fp32, which Turing's tensor cores do not take). The interpreter emulates fp16 operands with fp32
    accumulation exactly (numpy matmul in the accumulator's dtype) but not bf16, so there only fp16 runs native.
    """
    fp16 = dtype == torch.float16
    if arch is None:
        return DotPlan("ieee", native=fp16, form=FMA)
    if arch >= 80:
        return DotPlan("tf32", native=True, form=TENSOR_CORES)
    pow2 = head_block(dim_k) == dim_k and head_block(dim_v) == dim_v
    form = TURING_MMA if arch == TURING and fp16 and turing_mma and pow2 else FMA
    return DotPlan("ieee", native=True, form=form)


@dataclass(frozen=True)
class PrefillBlocks:
    """Launch shapes of the prefill kernels: kernel 1's key-column block and warps; kernel 2's state tile (BK x BV),
    the row slice its products take the state in (SPLIT_K < BK: through scratch) and warps; whether kernel 3 forms
    the outputs, and its value block and warps; whether w and u are formed ahead of the walk, and that kernel's
    warps."""

    bkc: int
    warps1: int
    bk: int
    bv: int
    split_k: int
    warps2: int
    prefetch: bool = False  # kernel 2 loads the next chunk's keys during this one (register state only)
    parallel_output: bool = False  # outputs in a third kernel over all chunks at once (register state only)
    bv3: int = 64  # that kernel's value block (at most the value head dim's block) and warps
    warps3: int = 4
    wu_ahead: bool = False  # w and u formed by a kernel of their own; the walk then chains two products per chunk
    warps_wu: int = 4  # that kernel's warps

    def __post_init__(self) -> None:
        if self.wu_ahead and not (self.parallel_output and not self.prefetch):
            raise ValueError(f"the walk over w and u formed ahead leaves the outputs to the third kernel and does not "
                             f"prefetch: it needs parallel_output=True, prefetch=False, got {self}")
        if self.prefetch and self.split_k != self.bk:
            raise ValueError(f"kernel 2 prefetches only with the state in registers (split_k == bk), got {self}")
        if self.parallel_output and self.split_k != self.bk:
            raise ValueError(f"kernel 2 leaves the outputs to a third kernel only with the state in registers "
                             f"(split_k == bk), got {self}")


def prefill_blocks(dim_k: int, dim_v: int, form: str) -> PrefillBlocks:
    """The launch shapes for head dims and a form (FORMS), before the compile target's limits (blocks_for_target).

    Kernel 1 takes 16 key columns at a time: at 32 its ten 16x16 accumulators spill. Its 16x16 products are small for
    more than one warp, and at one it compiles without spills for sm_75, sm_80 and sm_90; Triton's FMA dots take 8.
    Kernel 2 keeps the fp32 state tile in registers where dots take tensor cores, 32 value columns wide (enough
    programs for one long sequence), at 4 warps: two programs per Turing SM. sm_75 has no asynchronous copy, so
    there the walk loads the next chunk's keys while this one computes (prefetch). With the state in registers the
    outputs come from kernel 3 over all chunks at once: a shorter serial chain for more memory traffic; its value
    block of 128 reads each chunk's q once per value head (64 at K 256, whose operands would overflow shared memory).
    On sm_80+ w and u are formed ahead and the walk chains two products per chunk instead of three. Where registers
    would not hold the state (BK 256 on sm_75, every FMA form) it goes through scratch in row slices with 16-wide
    value blocks. Timings and sm75_fit's counts for each choice: docs/benchmarks.md.
    """
    bk = head_block(dim_k)
    bv = min(32, head_block(dim_v))
    bv3 = min(128 if bk <= 128 else 64, head_block(dim_v))
    if form == FMA:
        return PrefillBlocks(SUB, 8, bk, min(16, bv), min(32, bk), 8)
    if form == TURING_MMA:
        if bk > 128:
            return PrefillBlocks(SUB, 1, bk, 16, 128, 8)
        return PrefillBlocks(SUB, 1, bk, bv, bk, 4, prefetch=True, parallel_output=True, bv3=bv3, warps3=8)
    return PrefillBlocks(SUB, 1, bk, bv, bk, MAX_WGMMA_WARPS2, parallel_output=True, bv3=bv3, warps3=4, wu_ahead=True)


def launchable(blocks: PrefillBlocks, arch: int | None, key_row_bytes: int = 0) -> bool:
    """Whether kernel 2 may run with `blocks` when compiled for `arch` (None: the interpreter) on key rows of
    `key_row_bytes` (head dim x element size). On sm_90 (see above): below 4 warps (mma.sync) as anywhere; on wgmma
    at most MAX_WGMMA_WARPS2 warps, without prefetch and on 16-byte aligned rows only."""
    if arch is None or not 90 <= arch < 100 or blocks.warps2 < 4:
        return True
    return blocks.warps2 <= MAX_WGMMA_WARPS2 and not blocks.prefetch and not key_row_bytes % 16


def blocks_for_target(blocks: PrefillBlocks, arch: int | None, key_row_bytes: int) -> PrefillBlocks:
    """A form's own blocks as kernel 2 can run them compiled for `arch`: on sm_90 wgmma without prefetch at most
    MAX_WGMMA_WARPS2 warps, and key rows that are not 16-byte aligned on mma.sync at 2 warps, walking over Ti (the
    walk over w and u at 2 warps takes 20 times its 4-warp time; docs/benchmarks.md)."""
    if launchable(blocks, arch, key_row_bytes):
        return blocks
    warps = MMA_SYNC_WARPS2 if key_row_bytes % 16 else min(blocks.warps2, MAX_WGMMA_WARPS2)
    return replace(blocks, warps2=warps, prefetch=False, wu_ahead=blocks.wu_ahead and warps != MMA_SYNC_WARPS2)


@dataclass(frozen=True)
class PrefillPlan:
    """Everything a prefill call launches with: the compile target, the products' plan, the launch shapes, and
    kernel 3's value block and the w/u kernel's column block at these head dims."""

    arch: int | None
    dots: DotPlan
    blocks: PrefillBlocks
    bv3: int
    bc_wu: int


def resolve(
    arch: int | None, dtype: torch.dtype, dim_k: int, dim_v: int, turing_mma: bool,
    dots: DotPlan | None = None, blocks: PrefillBlocks | None = None,
) -> PrefillPlan:  # fmt: skip
    """The plan for a compile target, input dtype, head dims and TensorCore75's state; `dots` and `blocks` replace
    the target's own. Raises UnlaunchableBlocks for blocks kernel 2 cannot run with there."""
    dots = dots or plan_for_target(arch, dtype, dim_k, dim_v, turing_mma)
    row_bytes = dim_k * dtype.itemsize
    if blocks is None:
        blocks = blocks_for_target(prefill_blocks(dim_k, dim_v, dots.form), arch, row_bytes)
    elif not launchable(blocks, arch, row_bytes):
        raise UnlaunchableBlocks(
            f"caovan GDN: {blocks} cannot run compiled for sm_{arch}: at 4 warps or more kernel 2 runs on wgmma "
            f"there, which takes at most {MAX_WGMMA_WARPS2} warps, no prefetch and key rows that are a multiple of 16 "
            f"bytes (key rows of {row_bytes} bytes here); Triton 3.6's code reads out of range or computes wrong "
            f"results otherwise. Pass blocks below 4 warps (mma.sync runs any of them), or leave blocks out for the "
            f"target's own (gdn.plan.prefill_plan)"
        )
    return PrefillPlan(arch, dots, blocks, min(blocks.bv3, head_block(dim_v)), min(64, head_block(max(dim_k, dim_v))))


_plans: dict[tuple, PrefillPlan] = {}


def prefill_plan(
    device: torch.device, dtype: torch.dtype, dim_k: int, dim_v: int, turing_mma: bool,
    dots: DotPlan | None = None, blocks: PrefillBlocks | None = None,
) -> PrefillPlan:  # fmt: skip
    """resolve() for inputs on `device`, compiled for its target (_common.compile_arch), cached: a prefill call
    does one dict lookup."""
    key = (device, dtype, dim_k, dim_v, turing_mma, dots, blocks)
    plan = _plans.get(key)
    if plan is None:
        plan = resolve(compile_arch(device.type, device.index), dtype, dim_k, dim_v, turing_mma, dots, blocks)
        _plans[key] = plan
    return plan
