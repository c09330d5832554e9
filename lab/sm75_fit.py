"""Turing fitness of every GDN kernel configuration the wrappers can launch, checked without a GPU.

Each configuration is compiled for sm_75 (triton.compile with GPUTarget("cuda", 75, 32)); the PTX then goes
through Triton's bundled ptxas -v for sm_75 to read registers and spills. A configuration fits when its shared
memory is within the 64 KB an sm_75 SM has, ptxas reports no spill stores or loads, (fp16 inputs) the PTX holds
no bf16 instruction, which sm_75 lacks, and its dots run where its form says: the FMA form (Triton's own lowering)
holds no mma; the prefill's tensor-core form, compiled through TensorCore75's hook as a 2080 Ti user's process
compiles it, holds mma.sync m16n8k8.

Run as `python -m lab.sm75_fit [--json]` from the repository root (TRITON_INTERPRET must be unset).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from caovan_kernels import tensorcore75
from caovan_kernels.attention.plan import MIN_TOKENS_PER_SPLIT, next_pow2, plan_launch
from caovan_kernels.attention import split_kv
from caovan_kernels.gdn import chunk_h, chunk_o, chunk_wy, l2norm, recurrent
from caovan_kernels.gdn._common import CHUNK, SUB, head_block
from caovan_kernels.gdn.plan import FMA, TURING_MMA, resolve
from caovan_kernels.tensorcore75.registers import resident_blocks

SM75 = GPUTarget("cuda", 75, 32)
SM75_SHARED_BYTES = 64 * 1024
# head dims that reach each power-of-two block the wrappers can pick (100 stands for the masked, unaligned case)
HEAD_DIMS = (16, 32, 64, 100, 128, 256)


@dataclass
class Config:
    kernel: str
    label: str
    fn: object
    signature: dict[str, str]
    constexprs: dict[str, object]
    aligned: list[str]  # arguments the launch sees 16-divisible (Triton specialises on that)
    num_warps: int
    tensor_cores: bool = False  # compiled through TensorCore75, expected on m16n8k8


@dataclass
class Fit:
    kernel: str
    config: str
    shared_bytes: int
    registers: int
    spill_bytes: int
    bf16_in_ptx: bool
    tensor_cores: bool
    mma_in_ptx: bool
    num_warps: int

    @property
    def fits(self) -> bool:
        return (self.shared_bytes <= SM75_SHARED_BYTES and self.spill_bytes == 0 and not self.bf16_in_ptx
                and self.mma_in_ptx == self.tensor_cores)

    @property
    def programs_per_sm(self) -> int:
        return resident_blocks(self.registers, self.shared_bytes, self.num_warps)


def _signature(fn: object, types: dict[str, str], constexprs: dict[str, object]) -> dict[str, str]:
    sig = {}
    for name in fn.arg_names:
        sig[name] = "constexpr" if name in constexprs else types.get(name, "*fp16" if name.endswith("_ptr") else "i32")
    return sig


def _dims_aligned(dim_k: int, dim_v: int) -> list[str]:
    return [n for n, d in (("dim_k", dim_k), ("dim_v", dim_v)) if d % 16 == 0]


def launch_configs() -> list[Config]:
    """Every (kernel, blocks, warps, layout) the wrappers launch on an sm_75 GPU (fp16), per reachable head dim, in
    each form the prefill takes there (FMA; Turing MMA where TensorCore75 is on and the plan takes it)."""
    configs: list[Config] = []
    ptr_f32 = {"gcum_ptr": "*fp32", "scratch_ptr": "*fp32", "A_log_ptr": "*fp32", "dt_bias_ptr": "*fp32", "h0_ptr": "*fp32", "ht_ptr": "*fp32"}
    ints = {"chunk_ptr": "*i32", "cu_ptr": "*i32", "slot_ptr": "*i32", "accepted_ptr": "*i32", "has_h0_ptr": "*i8"}
    floats = {"scale": "fp32", "beta_scale": "fp32", "softplus_beta": "fp32", "softplus_threshold": "fp32"}
    types = {**ptr_f32, **ints, **floats}
    strides = ["stride_q", "stride_k", "stride_v", "stride_state", "stride_h0", "stride_ht"]
    for dim in HEAD_DIMS:
        with_turing_mma = resolve(75, torch.float16, dim, dim, True).dots.form == TURING_MMA
        for form in (FMA, TURING_MMA) if with_turing_mma else (FMA,):
            tc = form == TURING_MMA
            launch = resolve(75, torch.float16, dim, dim, tc)
            b = launch.blocks
            ce = {"BKC": b.bkc, "SUB": SUB, "DOT": "ieee", "NATIVE": True, "TENSOR_CORES": tc}
            fn = chunk_wy._chunk_wy_kernel
            configs.append(Config("chunk_wy", f"{form} K=V={dim} BKC={b.bkc} w{b.warps1}", fn, _signature(fn, types, ce), ce, strides + _dims_aligned(dim, dim), b.warps1, tc))
            # kernel 2's default; in the prefetching form also the other that `blocks` can launch and the sweeps
            # time (8 warps), with the outputs in kernel 3 and in the walk; and the default with its outputs in
            # kernel 3 as Triton specializes it at launch, where an int argument of 1 becomes a constant: per-sequence
            # states (h0_mode = ht_mode = 1) and vLLM's cache slots (use_has_h0 = 1), which can spill where the
            # generic launch does not.
            kernel2 = [(b, {})]
            if b.prefetch:
                eight = dataclasses.replace(b, warps2=8)
                kernel2 += [(eight, {}), (dataclasses.replace(eight, parallel_output=False), {})]
            if b.parallel_output:
                kernel2 += [(b, {"h0_mode": 1, "ht_mode": 1}), (b, {"use_has_h0": 1})]
            for (b2, specialized), v_first in itertools.product(kernel2, (False, True)):
                ce = {"BT": CHUNK, "BK": b2.bk, "BV": b2.bv, "SPLIT_K": b2.split_k, "V_FIRST": v_first, "DOT": "ieee", "NATIVE": True,
                      "PREFETCH": b2.prefetch, "PARALLEL_OUT": b2.parallel_output, **specialized}
                fn = chunk_h._chunk_state_output_kernel
                label = (f"{form} K=V={dim} BK={b2.bk} BV={b2.bv} SK={b2.split_k} w{b2.warps2}{' pf' if b2.prefetch else ''}"
                         f"{' po' if b2.parallel_output else ''} {'VK' if v_first else 'KV'}"
                         f"{''.join(f' {k}=1' for k in specialized)}")
                configs.append(Config("chunk_state_output", label, fn, _signature(fn, types, ce), ce, strides + _dims_aligned(dim, dim), b2.warps2, tc))
            if b.parallel_output:
                ce = {"BT": CHUNK, "BK": b.bk, "BV": launch.bv3, "DOT": "ieee", "NATIVE": True}
                fn = chunk_o._chunk_output_kernel
                configs.append(Config("chunk_output", f"{form} K=V={dim} BK={b.bk} BV={launch.bv3} w{b.warps3}", fn, _signature(fn, types, ce), ce, strides + _dims_aligned(dim, dim), b.warps3, tc))
        bk, bv, warps3 = recurrent.decode_blocks(dim, dim, interpreted=False)
        for v_first in (False, True):
            ce = {"BK": bk, "BV": bv, "V_FIRST": v_first}
            fn = recurrent._recurrent_kernel
            label = f"K=V={dim} BK={bk} BV={bv} w{warps3} {'VK' if v_first else 'KV'}"
            configs.append(Config("recurrent", label, fn, _signature(fn, types, ce), ce, strides + _dims_aligned(dim, dim), warps3))
        ce = {"BD": head_block(dim)}
        fn = l2norm._l2norm_scale_kernel
        configs.append(Config("l2norm_scale", f"dim={dim} BD={head_block(dim)} w1", fn, _signature(fn, types, ce), ce, ["stride_x_tok"] + (["dim"] if dim % 16 == 0 else []), 1))
    return configs + split_kv_configs()


# The split-KV verify attention at Qwen3.6-27B's attention head dim (256) and a smaller one, for each rows-per-program
# the plan launches (16 and 32 rows: up to 5 query tokens of 6 heads; 64 rows: 8 tokens of 8 heads), in the two forms
# a 2080 Ti runs: TensorCore75's m16n8k8 (fp16 operands, as a user's process compiles it) and Triton's FMA dots,
# whose launch the plan picks apart (and which refuses 64 rows).
SPLIT_KV_SHAPES = ((256, 6, 2), (256, 6, 5), (256, 8, 8), (128, 6, 4))  # (head dim, query heads per KV head, query len)


def split_kv_configs() -> list[Config]:
    configs: list[Config] = []
    types = {"o_part_ptr": "*fp32", "m_part_ptr": "*fp32", "l_part_ptr": "*fp32", "block_table_ptr": "*i32",
             "seq_lens_ptr": "*i32", "cu_q_ptr": "*i32", "scale_log2": "fp32"}
    strides = ["stride_qt", "stride_qh", "stride_kb", "stride_ks", "stride_kh", "stride_vb", "stride_vs", "stride_vh",
               "stride_op", "stride_or", "stride_ot", "stride_oh", "stride_mp"]
    for dim, group, query_len in SPLIT_KV_SHAPES:
        for tc in (False, True):
            launch = plan_launch(1, 2, group, query_len, 68, tensor_cores=tc)
            if launch is None:
                continue
            form = TURING_MMA if tc else FMA
            # a stride of 1 (the head dim's) is a constant at launch, as Triton specializes it; the block size is the
            # 27B's at TP2 (not a power of two)
            ce = {"HEAD_DIM": dim, "HEAD_PAD": dim, "GROUP": group, "BLOCK_SIZE": 784, "ROWS": launch.rows,
                  "TILE": launch.tile, "SPLITS": launch.splits, "MIN_TILES": MIN_TOKENS_PER_SPLIT // launch.tile,
                  "NATIVE": True, "stride_kd": 1, "stride_vd": 1}
            fn = split_kv._segment_kernel
            configs.append(Config("split_kv_segment", f"{form} D={dim} rows={launch.rows} tile={launch.tile} w{launch.num_warps}",
                                  fn, _signature(fn, types, ce), ce, strides, launch.num_warps, tc))
        ce = {"HEAD_DIM": dim, "HEAD_PAD": dim, "GROUP": group, "SPLITS": launch.splits,
              "SPLITS_PAD": next_pow2(launch.splits), "CHUNK": 8}
        fn = split_kv._merge_kernel
        configs.append(Config("split_kv_merge", f"D={dim} rows={launch.rows} splits={launch.splits} w4", fn,
                              _signature(fn, types, ce), ce, strides, 4))
    return configs


def _attrs(cfg: Config) -> dict[tuple[int, ...], list[list[object]]]:
    names = cfg.fn.arg_names
    aligned = {n for n in names if n.endswith("_ptr")} | set(cfg.aligned)
    return {(names.index(n),): [["tt.divisibility", 16]] for n in aligned if n in names and n not in cfg.constexprs}


_PTXAS_STATS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_path() -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")


def check(cfg: Config) -> Fit:
    # The hook is the process's: attached for the tensor-core form only, so the FMA form is Triton's own lowering.
    tensorcore75.process().activate("force" if cfg.tensor_cores else "off")
    src = ASTSource(cfg.fn, cfg.signature, constexprs=cfg.constexprs, attrs=_attrs(cfg))
    compiled = triton.compile(src, target=SM75, options={"num_warps": cfg.num_warps})
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        ptx_file = Path(tmp) / "k.ptx"
        ptx_file.write_text(ptx)
        report = subprocess.run(
            [ptxas_path(), "-v", "--gpu-name", "sm_75", str(ptx_file), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
    registers = int(_PTXAS_STATS.search(report).group(1))
    spill = sum(int(s) + int(l) for s, l in _SPILLS.findall(report))
    bf16 = re.search(r"\.bf16|bf16x2", ptx) is not None
    mma = "mma.sync.aligned.m16n8k8" in ptx
    return Fit(cfg.kernel, cfg.label, compiled.metadata.shared, registers, spill, bf16, cfg.tensor_cores, mma,
               cfg.num_warps)


def _check_index(index: int) -> Fit:
    return check(launch_configs()[index])


def check_all(workers: int | None = None) -> list[Fit]:
    """Every configuration, compiled in `workers` processes (default: one per core, up to 4): Triton compiles on
    one thread, and each worker owns its own TensorCore75 state."""
    count = len(launch_configs())
    workers = workers or min(os.cpu_count() or 1, 4)
    if workers <= 1:
        return [check(cfg) for cfg in launch_configs()]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_check_index, range(count)))


def table(fits: list[Fit]) -> str:
    lines = [f"{'kernel':<20} {'config':<46} {'shared B':>9} {'regs':>5} {'spill B':>8} {'bf16':>5} {'mma':>5} "
             f"{'per SM':>6} fits"]
    for f in fits:
        lines.append(f"{f.kernel:<20} {f.config:<46} {f.shared_bytes:>9} {f.registers:>5} {f.spill_bytes:>8} "
                     f"{str(f.bf16_in_ptx):>5} {str(f.mma_in_ptx):>5} {f.programs_per_sm:>6} "
                     f"{'yes' if f.fits else 'NO'}")
    return "\n".join(lines)


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the fitness check compiles for sm_75", file=sys.stderr)
        return 2
    fits = check_all()
    if "--json" in sys.argv:
        print(json.dumps([asdict(f) | {"fits": f.fits, "programs_per_sm": f.programs_per_sm} for f in fits]))
    else:
        print(table(fits))
    return 0 if all(f.fits for f in fits) else 1


if __name__ == "__main__":
    sys.exit(main())
