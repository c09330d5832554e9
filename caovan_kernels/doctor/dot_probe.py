"""`python -m caovan_kernels.doctor.dot_probe SM`: print the PTX Triton emits for a small fp16 tl.dot on sm_SM.

A separate process, because the doctor may run where Triton is in interpreter mode (an engine with GDNCore on a
CPU), and Triton fixes that mode at import."""

import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

BLOCK = 32


@triton.jit
def dot_probe(a, b, c, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tile = offs[:, None] * BLOCK + offs[None, :]
    tl.store(c + tile, tl.dot(tl.load(a + tile), tl.load(b + tile)))


def probe_source() -> triton.compiler.ASTSource:
    return triton.compiler.ASTSource(
        fn=dot_probe, signature={"a": "*fp16", "b": "*fp16", "c": "*fp32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": BLOCK})


def ptx_for(sm: int) -> str:
    return triton.compile(probe_source(), target=GPUTarget("cuda", sm, 32)).asm["ptx"]


if __name__ == "__main__":
    print(ptx_for(int(sys.argv[1])))
