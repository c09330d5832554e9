"""The cubin reader (caovan_kernels/tensorcore75/cubin.py) against Triton's own ptxas -v and cuobjdump, on PTX
built here: a kernel that spills (`.maxnreg 32` with 64 values live), one that fits its registers, and one with a
local array (local memory without spills), in one PTX module compiled for sm_75."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from caovan_kernels.errors import CubinError
from caovan_kernels.tensorcore75.cubin import (
    Resources,
    kernel_resources,
    read_resources,
)
from tests.caovan_kernels.tensorcore75.sm75_ptx import (
    LOCAL_ARRAY,
    assemble,
    live_values,
    module,
    tool,
)

# `spills` loads 64 values, too many for its .maxnreg 32 (ptxas's own report below confirms it spills)
PTX = module(live_values("spills", 64, 32), live_values("fits", 8, None), LOCAL_ARRAY)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str, Path]:
    """(cubin, ptxas -v log, cubin path) from Triton's bundled ptxas for sm_75."""
    cubin, log = assemble(PTX)
    path = tmp_path_factory.mktemp("cubin") / "k.cubin"
    path.write_bytes(cubin)
    return cubin, log, path


def _ptxas_v(log: str) -> dict[str, Resources]:
    """ptxas -v's own report per entry function: registers, stack frame, cumulative stack size (printed if any)."""
    out = {}
    for name, body in re.findall(r"Compiling entry function '(\w+)'.*?\n(.*?)Compile time", log, re.S):
        frame = re.search(r"(\d+) bytes stack frame", body)
        stack = re.search(r"(\d+) bytes cumulative stack size", body)
        registers = re.search(r"Used (\d+) registers", body)
        out[name] = Resources(int(registers[1]), int(frame[1]), int(stack[1]) if stack else 0)
    return out


def test_it_reads_what_ptxas_reports_for_each_function(compiled) -> None:
    cubin, log, _ = compiled
    reported = _ptxas_v(log)
    assert set(reported) == {"spills", "fits", "local_array"}
    assert read_resources(cubin) == reported
    # the three cases are what they are meant to be, as ptxas itself says
    spill_stores = dict(re.findall(r"Function properties for (\w+)\n\s+\d+ bytes stack frame, (\d+) bytes spill "
                                   r"stores", log))
    assert reported["spills"].registers <= 32 and int(spill_stores["spills"]) > 0 and reported["spills"].local_bytes
    assert int(spill_stores["fits"]) == 0 and reported["fits"].local_bytes == 0
    assert int(spill_stores["local_array"]) == 0 and reported["local_array"].local_bytes == 256


def test_its_attribute_ids_are_the_ones_cuobjdump_names(compiled) -> None:
    """cuobjdump -elf names each EIATTR record: the values under REGCOUNT, FRAME_SIZE and MIN_STACK_SIZE are the
    ones the reader returns, function by function."""
    cubin, _, path = compiled
    text = subprocess.run([tool("cuobjdump"), "-elf", str(path)], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    named: dict[str, dict[str, int]] = {}
    for attribute, function, value in re.findall(
            r"Attribute:\s+EIATTR_(REGCOUNT|FRAME_SIZE|MIN_STACK_SIZE)\s+Format:\s+EIFMT_SVAL\s+Value:\s+function: "
            r"(\S+)\(0x[0-9a-f]+\)\s+[a-z ]+: (0x[0-9a-f]+|\d+)", text):
        named.setdefault(function, {})[attribute] = int(value, 0)
    read = read_resources(cubin)
    assert {f for f, v in named.items() if "REGCOUNT" in v} == set(read)
    for function, resources in read.items():
        assert named[function] == {"REGCOUNT": resources.registers, "FRAME_SIZE": resources.frame_bytes,
                                   "MIN_STACK_SIZE": resources.stack_bytes}, function


def test_one_kernel_by_name(compiled) -> None:
    cubin, _, _ = compiled
    assert kernel_resources(cubin, "fits").local_bytes == 0
    with pytest.raises(CubinError, match=r"no register count for missing .*fits, local_array, spills"):
        kernel_resources(cubin, "missing")


@pytest.mark.parametrize(("cut", "message"), [
    (lambda c: b"%PDF" + c[4:], "not a little-endian ELF64"),
    (lambda c: c[:200], "section header table is cut short"),
])
def test_what_is_not_a_cubin_is_refused_with_a_reason(compiled, cut, message) -> None:
    with pytest.raises(CubinError, match=message):
        read_resources(cut(compiled[0]))
