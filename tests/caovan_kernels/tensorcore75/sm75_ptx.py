"""Hand-written sm_75 PTX kernels with known register and local-memory behaviour, and Triton's bundled ptxas to
assemble them (test_cubin.py, test_registers.py)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

HEADER = ".version 6.4\n.target sm_75\n.address_size 64"


def live_values(name: str, count: int, maxnreg: int | None) -> str:
    """An entry that loads `count` floats, multiplies them pairwise and stores them: with `.maxnreg` below what
    they need at once, ptxas spills."""
    lines = [f".visible .entry {name}(.param .u64 {name}_in, .param .u64 {name}_out)", ".reqntid 128, 1, 1"]
    if maxnreg:
        lines.append(f".maxnreg {maxnreg}")
    lines += ["{", f"\t.reg .f32 %f<{2 * count}>;", "\t.reg .b64 %rd<4>;", "\t.reg .b32 %r<2>;",
              f"\tld.param.u64 %rd1, [{name}_in];", f"\tld.param.u64 %rd2, [{name}_out];",
              "\tmov.u32 %r1, %tid.x;", "\tmul.wide.u32 %rd3, %r1, 4;", "\tadd.s64 %rd1, %rd1, %rd3;"]
    lines += [f"\tld.global.volatile.f32 %f{i}, [%rd1+{512 * i}];" for i in range(count)]
    lines += [f"\tmul.f32 %f{count + i}, %f{i}, %f{(7 * i + 3) % count};" for i in range(count)]
    lines += [f"\tst.global.volatile.f32 [%rd2+{4 * i}], %f{count + (5 * i + 1) % count};" for i in range(count)]
    return "\n".join([*lines, "\tret;", "}"])


# A 256-byte local array indexed by the thread: local memory that no register budget removes.
LOCAL_ARRAY = """
.visible .entry local_array(.param .u64 local_array_out)
.reqntid 64, 1, 1
{
	.local .align 4 .b8 buf[256];
	.reg .b64 %rd<5>;
	.reg .f32 %f<3>;
	.reg .b32 %r<4>;
	ld.param.u64 %rd1, [local_array_out];
	mov.u32 %r1, %tid.x;
	mov.u64 %rd2, buf;
	and.b32 %r2, %r1, 63;
	mul.wide.u32 %rd3, %r2, 4;
	add.s64 %rd4, %rd2, %rd3;
	cvt.rn.f32.u32 %f1, %r1;
	st.local.f32 [%rd4], %f1;
	xor.b32 %r3, %r2, 7;
	mul.wide.u32 %rd3, %r3, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.local.f32 %f2, [%rd4];
	st.global.f32 [%rd1], %f2;
	ret;
}
"""


def module(*entries: str) -> str:
    return "\n\n".join([HEADER, *entries])


def tool(name: str) -> str:
    """The path of one of Triton's bundled NVIDIA tools (ptxas, cuobjdump)."""
    from triton import knobs

    return getattr(knobs.nvidia, name).path


def assemble(ptx: str) -> tuple[bytes, str]:
    """(cubin, ptxas -v log) for sm_75 from Triton's bundled ptxas."""
    with tempfile.TemporaryDirectory() as folder:
        source, binary = Path(folder) / "k.ptx", Path(folder) / "k.cubin"
        source.write_text(ptx)
        done = subprocess.run([tool("ptxas"), "-v", "--gpu-name=sm_75", str(source), "-o", str(binary)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"ptxas refused the PTX:\n{done.stderr}")
        return binary.read_bytes(), done.stderr
