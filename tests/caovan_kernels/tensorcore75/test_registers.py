"""The Turing register budget and the `.maxnreg` rebuild (caovan_kernels/tensorcore75/registers.py), the rebuild
with Triton's bundled ptxas on hand-written sm_75 PTX (the real case, vLLM's head_dim-256 attention, is in
tests/sm75/test_survey.py)."""

from __future__ import annotations

import pytest

from caovan_kernels.tensorcore75.cubin import kernel_resources
from caovan_kernels.tensorcore75.registers import (
    Binary,
    register_budget,
    resident_blocks,
    spend_register_budget,
    with_maxnreg,
)
from tests.caovan_kernels.tensorcore75.sm75_ptx import (
    LOCAL_ARRAY,
    assemble,
    live_values,
    module,
)


@pytest.mark.parametrize(("num_warps", "shared", "budget"), [
    (4, 40960, 255),  # vLLM's hd256 attention: one block per SM, 512 registers a thread would be free: capped at 255
    (4, 20480, 168),  # three blocks: 65536 / 384 threads = 170, in steps of 8
    (4, 16384, 128),  # four blocks
    (2, 16384, 255),  # four blocks of 64 threads
    (8, 24576, 128),  # two blocks of 256 threads
    (4, 0, 64),  # no shared memory: 8 blocks, the SM's 32 warps
    (1, 0, 128),  # 16 blocks, the SM's block limit
    (32, 0, 64),  # one block of 1024 threads
    (2, 12288, 168),  # five blocks, 10 warps: 3 in one of the four register sub-partitions, 16384 / 96 threads
])
def test_the_budget_keeps_the_blocks_shared_memory_allows(num_warps: int, shared: int, budget: int) -> None:
    assert register_budget(num_warps, shared) == budget


@pytest.mark.parametrize(("registers", "shared", "num_warps", "blocks"), [
    (246, 57344, 8, 1),  # 7936 registers a warp (246 x 32 rounded up to 256): 2 in each 16384-register
    # sub-partition, 8 warps an SM; 56 KB of 64
    (168, 12288, 4, 3),  # 5376 a warp: 3 a sub-partition, 12 warps; shared memory would allow 5
    (185, 3072, 1, 8),  # 6144 a warp: 2 a sub-partition (the whole file would hold 10); 21 by shared memory
    (64, 13107, 1, 4),  # shared memory goes in steps of 256 bytes: 13312 a block (13107 would fit 5)
    (32, 0, 1, 16),  # the SM's block limit
    (64, 0, 8, 4),  # the SM's 32 warps
    (255, 65537, 1, 0),  # more shared memory than the SM has
])
def test_resident_blocks_follow_the_occupancy_rules(registers: int, shared: int, num_warps: int, blocks: int) -> None:
    assert resident_blocks(registers, shared, num_warps) == blocks


def test_maxnreg_goes_where_triton_puts_it() -> None:
    ptx = module(live_values("k", 4, None))
    assert ".reqntid 128, 1, 1\n.maxnreg 200\n{" in with_maxnreg(ptx, 200)
    with pytest.raises(ValueError, match="already has a .maxnreg"):
        with_maxnreg(module(live_values("k", 4, 64)), 200)
    with pytest.raises(ValueError, match="expected one .reqntid directive in the PTX, found 2"):
        with_maxnreg(module(live_values("a", 4, None), live_values("b", 4, None)), 200)


def _first(ptx: str, kernel: str) -> Binary:
    cubin, _ = assemble(ptx)
    return Binary(ptx, cubin, kernel_resources(cubin, kernel), 0)


def _spy(calls: list[str]):
    def assemble_recording(ptx: str) -> bytes:
        calls.append(ptx)
        return assemble(ptx)[0]

    return assemble_recording


def test_local_memory_the_budget_cannot_remove_keeps_the_first_binary() -> None:
    """A local array stays in local memory whatever the registers: the rebuild is tried (64 threads, no shared
    memory: 16 blocks per SM, 64 registers each) and, using as much local memory, not kept."""
    first = _first(module(LOCAL_ARRAY), "local_array")
    assert first.resources.local_bytes == 256 and first.resources.registers < register_budget(2, 0) == 64
    calls: list[str] = []
    assert spend_register_budget(first, "local_array", 2, 0, _spy(calls)) is first
    assert len(calls) == 1 and ".reqntid 64, 1, 1\n.maxnreg 64\n" in calls[0]


def test_no_rebuild_without_local_memory_or_with_a_limit_of_its_own() -> None:
    calls: list[str] = []
    fits = _first(module(live_values("fits", 8, None)), "fits")
    assert spend_register_budget(fits, "fits", 4, 0, _spy(calls)) is fits
    spills = _first(module(live_values("spills", 64, 32)), "spills")  # a configuration's own maxnreg is respected
    assert spills.resources.local_bytes and spend_register_budget(spills, "spills", 4, 0, _spy(calls)) is spills
    assert calls == []
