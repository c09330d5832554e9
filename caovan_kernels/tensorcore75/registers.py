"""Registers a retargeted kernel may take on Turing, and the rebuild that uses them when ptxas spilled below that.

Triton's PTX names the block size (`.reqntid`) but no register limit, so ptxas picks one by its own heuristic, aiming
at several blocks per SM. It cannot see Triton's shared memory (allocated dynamically), which often allows fewer
blocks than that: vLLM's head_dim-256 attention takes 40 KB of Turing's 64 KB, one block per SM, yet ptxas stops at
168 registers (three blocks' worth) and spills. Registers up to what the SM can give the blocks that shared memory
lets in cost no occupancy; `.maxnreg` tells ptxas that budget (ptxas's --maxrregcount does not override its
heuristic).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .cubin import Resources, kernel_resources

# Turing (sm_75) per SM: its register file, shared memory, and block and warp limits; per thread: 255 registers,
# allocated in steps of 8 (a warp's registers come in units of 256). The register file is split among the SM's
# four sub-partitions (one scheduler each), and a warp takes all its registers from one of them; shared memory is
# allocated in steps of 256 bytes.
TURING_REGISTERS = 65536
TURING_SUB_PARTITIONS = 4
TURING_SHARED_PER_SM = 64 * 1024
TURING_BLOCKS_PER_SM = 16
TURING_WARPS_PER_SM = 32
TURING_MAX_REGISTERS = 255
_REGISTER_STEP = 8
_SHARED_STEP = 256

_REQNTID = re.compile(r"(?m)^\.reqntid [^\n]*\n")
_MAXNREG = re.compile(r"(?m)^\.maxnreg\b")


def register_budget(num_warps: int, shared_bytes: int) -> int:
    """Registers per thread that keep as many blocks of this kernel resident on a Turing SM as its shared memory
    (and the SM's block and warp limits) allow."""
    blocks = min(TURING_BLOCKS_PER_SM, TURING_WARPS_PER_SM // num_warps)
    if shared_bytes:
        blocks = min(blocks, TURING_SHARED_PER_SM // _round_up(shared_bytes, _SHARED_STEP))
    warps_per_partition = -(-max(blocks, 1) * num_warps // TURING_SUB_PARTITIONS)
    per_thread = TURING_REGISTERS // TURING_SUB_PARTITIONS // warps_per_partition // 32
    return min(TURING_MAX_REGISTERS, per_thread // _REGISTER_STEP * _REGISTER_STEP)


def resident_blocks(registers: int, shared_bytes: int, num_warps: int) -> int:
    """How many blocks (programs) of a kernel one Turing SM holds at once (0: none fits), by CUDA's occupancy rules.
    A 2080 Ti has 68 SMs, so a launch of more than 68 times this many blocks runs in waves; the H200 the Turing proxy
    runs on has 132 SMs (and more shared memory), so the proxy can run in one wave what a 2080 Ti runs in two."""
    warp_registers = _round_up(registers * 32, _REGISTER_STEP * 32)
    warps = TURING_REGISTERS // TURING_SUB_PARTITIONS // warp_registers * TURING_SUB_PARTITIONS
    by_shared = TURING_SHARED_PER_SM // _round_up(shared_bytes, _SHARED_STEP) if shared_bytes else TURING_BLOCKS_PER_SM
    return min(warps // num_warps, by_shared, TURING_WARPS_PER_SM // num_warps, TURING_BLOCKS_PER_SM)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def with_maxnreg(ptx: str, registers: int) -> str:
    """The PTX with `.maxnreg registers` on its entry, where Triton itself puts it (after `.reqntid`)."""
    if _MAXNREG.search(ptx):
        raise ValueError("the PTX already has a .maxnreg directive")
    out, found = _REQNTID.subn(lambda m: f"{m.group(0)}.maxnreg {registers}\n", ptx)
    if found != 1:
        raise ValueError(f"expected one .reqntid directive in the PTX, found {found}")
    return out


@dataclass(frozen=True)
class Binary:
    """The PTX Triton keeps and the cubin ptxas built from exactly that text."""

    ptx: str
    cubin: bytes
    resources: Resources
    maxnreg: int  # the .maxnreg added here; 0: ptxas's own choice


def spend_register_budget(first: Binary, kernel: str, num_warps: int, shared_bytes: int,
                          assemble: Callable[[str], bytes]) -> Binary:
    """`first` or, if it uses local memory while ptxas stayed under the register budget and its PTX sets no limit of
    its own (a configuration's maxnreg), its rebuild with `.maxnreg <budget>` when that uses less local memory.
    `assemble` is Triton's own cubin stage."""
    budget = register_budget(num_warps, shared_bytes)
    used = first.resources
    if not used.local_bytes or used.registers >= budget or _MAXNREG.search(first.ptx):
        return first
    candidate = with_maxnreg(first.ptx, budget)
    rebuilt = assemble(candidate)
    second = Binary(candidate, rebuilt, kernel_resources(rebuilt, kernel), budget)
    return second if second.resources.local_bytes < used.local_bytes else first
