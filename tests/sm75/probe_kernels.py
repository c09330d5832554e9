"""Small Triton kernels, one per kind of dot TensorCore75 decides about, and one autotuned (imported by tc75_probe.py
and autotune_probe.py)."""

import triton
import triton.language as tl


@triton.jit
def dot_kernel(a, b, c, BLOCK: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One BLOCK x BLOCK tile: c = a @ b, accumulated in ACC (operand dtypes come from the signature)."""
    offs = tl.arange(0, BLOCK)
    tile = offs[:, None] * BLOCK + offs[None, :]
    tl.store(c + tile, tl.dot(tl.load(a + tile), tl.load(b + tile), out_dtype=ACC, input_precision=PRECISION))


@triton.jit
def looped_dot_kernel(a, b, c, K, BLOCK: tl.constexpr):
    """c[BLOCK, BLOCK] = a[BLOCK, K] @ b[K, BLOCK], K a multiple of BLOCK: the shape of real matmul loops."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), tl.float32)
    for k0 in range(0, K, BLOCK):
        x = tl.load(a + offs[:, None] * K + (k0 + offs[None, :]))
        y = tl.load(b + (k0 + offs[:, None]) * BLOCK + offs[None, :])
        acc += tl.dot(x, y)
    tl.store(c + offs[:, None] * BLOCK + offs[None, :], acc)


@triton.jit
def mixed_dot_kernel(a, b, s, c, BLOCK: tl.constexpr):
    """An fp16 dot and an fp32 one in one kernel (GDNCore's sm_75 prefill has this shape)."""
    offs = tl.arange(0, BLOCK)
    tile = offs[:, None] * BLOCK + offs[None, :]
    half = tl.dot(tl.load(a + tile), tl.load(b + tile))
    tl.store(c + tile, tl.dot(half, tl.load(s + tile), input_precision="ieee"))


@triton.jit
def no_dot_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.exp(tl.load(x + offs, mask=mask)) * 2.0, mask=mask)


# Autotuned for tests/sm75/test_autotune_pruning.py: on sm_75 with TensorCore75, the 32 and the 64 tiles compile to
# one binary each whatever their num_stages, and the 128 x 128 tile on one warp (512 fp32 accumulators per thread)
# spills at 255 registers.
TUNED_CONFIGS = [
    *(triton.Config({"BM": 32, "BN": 32}, num_warps=4, num_stages=s) for s in (2, 3, 4)),
    *(triton.Config({"BM": 64, "BN": 64}, num_warps=4, num_stages=s) for s in (2, 3)),
    triton.Config({"BM": 128, "BN": 128}, num_warps=1, num_stages=2),
]


@triton.autotune(configs=TUNED_CONFIGS, key=["K"])
@triton.jit
def tuned_matmul_kernel(a, b, c, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c[M, N] = a[M, K] @ b[K, N], fp16 operands, fp32 accumulation; M, N, K multiples of the tiles."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :])
        y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)
