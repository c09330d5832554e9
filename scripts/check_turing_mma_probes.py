"""TensorCore75's own numbers on an NVIDIA GPU, without vLLM: plain Triton matmuls (the probe kernels of
tests/sm75/probe_kernels.py) on the native, sm_75-FMA and sm_75-mma paths, held to torch.

    python scripts/check_turing_mma_probes.py [--seed N]

fp16 operands: a K-looped 64x64 tile (K = 512) with 1, 2, 4 and 8 warps, and single tiles of 16, 32 and 64 with
fp32 and fp16 accumulation, against fp32 torch matmuls of the same fp16 values; fp16 products are exact in fp32,
so with fp32 accumulation only the summation order differs: |error| <= 1e-3 on sums of up to 512 N(0,1) products
(about 2^-22 relative per add, times sqrt(512)), and with fp16 accumulation the fp16 rounding of each partial sum:
relative 2e-2. int8: a 64x64x64 product must be exact (Triton's FMA path cannot compile it; mma and native only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sm75"))

FP32_ACC_ABS = 1e-3
FP16_ACC_REL = 2e-2


def _operands(seed: int, shape_a: tuple[int, int], shape_b: tuple[int, int], int8: bool = False):
    import torch

    gen = torch.Generator().manual_seed(seed)
    if int8:
        return (torch.randint(-128, 128, shape_a, generator=gen, dtype=torch.int8),
                torch.randint(-128, 128, shape_b, generator=gen, dtype=torch.int8))
    return torch.randn(*shape_a, generator=gen).half(), torch.randn(*shape_b, generator=gen).half()


def _cases():
    """name -> (kind, a shape, b shape, launch keywords)."""
    cases = {f"looped K=512 w{w}": ("looped", (64, 512), (512, 64), {"num_warps": w}) for w in (1, 2, 4, 8)}
    for block in (16, 32, 64):
        cases[f"tile {block} acc fp32"] = ("tile32", (block, block), (block, block), {})
        cases[f"tile {block} acc fp16"] = ("tile16", (block, block), (block, block), {})
    cases["int8 64x64x64"] = ("int8", (64, 64), (64, 64), {})
    return cases


def _child(path: str, seed: int, out: Path) -> None:
    import torch
    import triton.language as tl
    from probe_kernels import dot_kernel, looped_dot_kernel

    from caovan_kernels import tensorcore75
    from lab import turing_paths

    described = turing_paths.enter(path)
    results = {}
    for i, (name, (kind, sa, sb, kw)) in enumerate(_cases().items()):
        if kind == "int8" and path == "fma":
            continue
        a, b = _operands(seed + i, sa, sb, int8=kind == "int8")
        a, b = a.cuda(), b.cuda()
        block = sa[0]
        if kind == "looped":
            c = torch.full((64, 64), float("nan"), device="cuda")
            looped_dot_kernel[(1,)](a, b, c, sa[1], BLOCK=64, **kw)
        else:
            dtype = {"tile32": torch.float32, "tile16": torch.float16, "int8": torch.int32}[kind]
            acc = {"tile32": tl.float32, "tile16": tl.float16, "int8": tl.int32}[kind]
            c = torch.full((block, block), -1 if kind == "int8" else float("nan"), dtype=dtype, device="cuda")
            dot_kernel[(1,)](a, b, c, BLOCK=block, ACC=acc, PRECISION="tf32")
        results[name] = c.cpu()
    torch.cuda.synchronize()
    torch.save(results, out.with_suffix(".pt"))
    counts = tensorcore75.process().counts()
    out.write_text(json.dumps({"described": described, "by_kernel": counts.by_kernel, "retargeted": counts.retargeted}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CAOVAN_TEST_SEED", "0")) or None)
    opts = parser.parse_args()
    seed = opts.seed or int.from_bytes(os.urandom(3), "little")
    if opts.path:
        _child(opts.path, seed, opts.out)
        return 0
    import tempfile

    import torch

    from lab import turing_paths

    print(f"seed={seed} (replay: --seed {seed})")
    tmp = Path(tempfile.mkdtemp(prefix="mma-probes-"))
    meta = {p: turing_paths.run_child(Path(__file__), p, ["--seed", str(seed)], tmp / f"{p}.json", 600)
            for p in turing_paths.PATHS}
    outs = {p: torch.load(tmp / f"{p}.pt") for p in turing_paths.PATHS}
    ok = True
    print(f"{'case':<22} {'native':>10} {'sm_75 FMA':>10} {'sm_75 mma':>10}  limit")
    for i, (name, (kind, sa, sb, _)) in enumerate(_cases().items()):
        a, b = _operands(seed + i, sa, sb, int8=kind == "int8")
        exact = a.int() @ b.int() if kind == "int8" else a.float() @ b.float()
        cells = []
        for p in turing_paths.PATHS:
            if name not in outs[p]:
                cells.append("-")
                continue
            got = outs[p][name]
            if kind == "int8":
                err, limit = float((got != exact).sum()), 0.0
            elif kind == "tile16":
                err, limit = ((got.float() - exact).abs().max() / exact.abs().max()).item(), FP16_ACC_REL
            else:
                err, limit = (got.float() - exact).abs().max().item(), FP32_ACC_ABS
            ok &= err == err and err <= limit  # NaN (an unwritten output) fails
            cells.append(f"{err:.2e}")
        print(f"{name:<22} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}  {limit:g}")
    print(f"mma path decisions: {meta['mma']['by_kernel']}")
    print(f"result: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
