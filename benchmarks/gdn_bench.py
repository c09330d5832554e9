"""GDN kernel benchmark: caovan GDNCore against fla-core and vLLM's own GDN Triton kernels, side by side.

    python benchmarks/gdn_bench.py [--out FILE] [--quick] [--sweep] [--decode-only] [--path mma] [--sms 68]

fla-core is imported as `fla` and vLLM's kernels from its fla copy (`vllm.model_executor.layers.fla.ops` in 0.21,
`vllm.third_party.flash_linear_attention.ops` later; lab/vllm_kernels.py finds it) when importable
(neither is a dependency: put them on PYTHONPATH for the run); a missing peer is reported, not faked.
Shapes are Qwen3.6-27B's GDN layer at TP1 (H=16, HV=48) and TP2 (H=8, HV=24), K=V=128, fp16.

Per call it reports the GPU time (median over replays of a CUDA graph holding several calls, so launch gaps
vanish) and the eager wall time (host clock around back-to-back eager calls, then a sync: what vLLM pays, as
the GDN op runs outside its CUDA graphs). For decode it adds the state-traffic floor: the fp32 state bytes the
step must read and write over the copy bandwidth measured in the same run.

`--path fma|mma` runs the whole benchmark on the sm_75 code path (the Turing proxy, without or with TensorCore75;
lab/turing_paths.py), `--sms 68` on a 2080 Ti's number of SMs (lab/sm_limit.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caovan_kernels.gdn import (  # noqa: E402
    chunk_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
    recurrent,
)
from caovan_kernels.gdn.plan import PrefillBlocks, launchable, prefill_plan  # noqa: E402
from caovan_kernels.tensorcore75 import retargets_fp16_dots  # noqa: E402
from lab import sm_limit, turing_paths, vllm_kernels  # noqa: E402

TP = {"TP1": (16, 48), "TP2": (8, 24)}
DECODE_BATCHES = (1, 2, 64)
K = V = 128
DTYPE = torch.float16


def _peer(name: str) -> object | None:
    try:
        if name == "fla":
            import fla.ops.gated_delta_rule as mod
        else:
            mod = vllm_kernels.gdn_ops()
        return mod
    except Exception as exc:  # a peer that does not import is reported as missing
        print(f"[peer {name} unavailable: {exc!r}]")
        return None


def copy_bandwidth() -> float:
    """Device copy bandwidth in bytes/s, counting bytes read plus written (1 GiB each way)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * src.numel() / (ms * 1e-3)


def gpu_time_us(fn: Callable[[], object], calls_per_graph: int, replays: int = 20,
                stream: torch.cuda.Stream | None = None) -> float:
    """Median GPU time per call from CUDA-graph replays; falls back to events around eager calls if capture fails.
    `stream`: warm up and capture there (a green context's stream keeps the graph on its SMs, lab/sm_limit.py);
    by default a side stream and torch's own capture stream. Replays and eager calls run on the current stream: the
    caller makes `stream` current for them to run there too."""
    side = stream if stream is not None else torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls_per_graph):
                fn()
        run, per = graph.replay, calls_per_graph
    except Exception as exc:
        print(f"  [graph capture failed ({type(exc).__name__}: {str(exc)[:80]}); timing eager with events]")
        torch.cuda.synchronize()
        run, per = fn, 1
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per)
    return statistics.median(times)


def eager_wall_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(samples)


def prefill_case(H: int, HV: int, lens: list[int], blocks: object | None = None) -> dict[str, Callable[[], object]]:
    """caovan's prefill (with launch shapes `blocks`, default: its own) and the peers that import, on one input."""
    total = sum(lens)
    n = len(lens)
    q = torch.randn(1, total, H, K, device="cuda", dtype=DTYPE)
    k = torch.nn.functional.normalize(torch.randn(1, total, H, K, device="cuda", dtype=torch.float32), dim=-1).to(DTYPE)
    v = torch.randn(1, total, HV, V, device="cuda", dtype=DTYPE)
    g = -0.1 * torch.rand(1, total, HV, device="cuda", dtype=torch.float32)
    beta = torch.rand(1, total, HV, device="cuda", dtype=DTYPE)
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
    h0 = 0.1 * torch.randn(n, HV, K, V, device="cuda", dtype=torch.float32)
    fns: dict[str, Callable[[], object]] = {
        "caovan": lambda: chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                         blocks=blocks)
    }
    fla = _peer("fla")
    if fla is not None:
        from fla.ops.utils import prepare_chunk_indices

        cu64 = cu.long()
        ci = prepare_chunk_indices(cu64, 64)
        fns["fla-core"] = lambda: fla.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu64, cu_seqlens_cpu=cu64.cpu(), chunk_indices=ci
        )
    vl = _peer("vllm")
    if vl is not None:
        vllm_chunks = importlib.import_module(f"{vl.__name__}.index").prepare_chunk_indices

        cu64 = cu.long()
        ci_v = vllm_chunks(cu64, 64)
        h0_vk = h0.transpose(-1, -2).contiguous()  # vLLM keeps [V, K] states
        fns["vllm"] = lambda: vl.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=h0_vk, output_final_state=True, cu_seqlens=cu64, chunk_indices=ci_v
        )
    return fns


def decode_case(H: int, HV: int, B: int, T: int) -> tuple[dict[str, Callable[[], object]], int]:
    """One decode (T=1) or MTP=3 verify (T=4) step on a cache of 4*B+1 slots; returns (callables, state bytes)."""
    tokens = B * T
    q = torch.randn(1, tokens, H, K, device="cuda", dtype=DTYPE)
    k = torch.randn(1, tokens, H, K, device="cuda", dtype=DTYPE)
    v = torch.randn(1, tokens, HV, V, device="cuda", dtype=DTYPE)
    a = torch.randn(tokens, HV, device="cuda", dtype=DTYPE)
    b = torch.randn(tokens, HV, device="cuda", dtype=DTYPE)
    A_log = torch.rand(HV, device="cuda") - 1.0
    dt_bias = torch.randn(HV, device="cuda")
    cache = 0.1 * torch.randn(1 + 4 * B, HV, V, K, device="cuda", dtype=torch.float32)
    cu = torch.arange(0, tokens + 1, T, dtype=torch.int32, device="cuda")
    if T == 1:
        slots = torch.arange(1, B + 1, dtype=torch.int32, device="cuda")
        accepted = None
    else:
        slots = torch.arange(1, 1 + B * T, dtype=torch.int32, device="cuda").view(B, T)
        accepted = torch.full((B,), 2, dtype=torch.int32, device="cuda")
    out = torch.empty_like(v)
    fns: dict[str, Callable[[], object]] = {
        "caovan": lambda: fused_sigmoid_gating_delta_rule_update(
            A_log, a, b, dt_bias, q, k, v, initial_state=cache, cu_seqlens=cu, ssm_state_indices=slots,
            num_accepted_tokens=accepted, use_qk_l2norm_in_kernel=True, out=out,
        )
    }  # fmt: skip
    vl = _peer("vllm")
    if vl is not None:
        fns["vllm"] = lambda: vl.fused_sigmoid_gating_delta_rule_update(
            A_log, a, b, dt_bias, q, k, v, initial_state=cache, inplace_final_state=True, cu_seqlens=cu,
            ssm_state_indices=slots, num_accepted_tokens=accepted, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
    fla = _peer("fla")
    if fla is not None:
        # fla has no slot cache: it reads B dense states and returns new final states (per-token states of a
        # verify step are not kept), so its state traffic is smaller than the real step's
        h0 = 0.1 * torch.randn(B, HV, K, V, device="cuda", dtype=torch.float32)
        qb, kb, vb = (x.view(B, T, *x.shape[2:]) for x in (q, k, v))
        ab, bb = a.view(B, T, HV), b.view(B, T, HV)
        fns["fla-core"] = lambda: fla.fused_recurrent_gated_delta_rule(
            qb, kb, vb, ab, beta=bb, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True,
        )  # fmt: skip
    state = HV * K * V * 4
    writes = T if T > 1 else 1  # verify keeps the state after every draft position
    return fns, B * state * (1 + writes)


def sweep(stream: torch.cuda.Stream | None, prefill: bool = True) -> None:
    """GPU time of caovan's kernels at TP2 under other block/warp choices (tuning aid; defaults unchanged): decode
    steps, then (`prefill`) 1x8192 prefills."""
    H, HV = TP["TP2"]
    default_decode = recurrent.decode_blocks
    for bv, warps in ((8, 1), (8, 2), (16, 1), (16, 2), (16, 4), (32, 1), (32, 2), (32, 4), (32, 8), (64, 4),
                      (64, 8)):
        recurrent.decode_blocks = lambda dk, dv, interpreted, bv=bv, warps=warps: (128, bv, warps)
        recurrent._launch_cache.clear()
        for B, T in itertools.product(DECODE_BATCHES, (1, 4)):  # a choice must hold at every batch, not only B=64
            fns, _ = decode_case(H, HV, B, T)
            us = gpu_time_us(fns["caovan"], 20, stream=stream)
            print(f"sweep decode B={B} T={T} BV={bv} warps={warps}: {us:.1f} us", flush=True)
    recurrent.decode_blocks = default_decode
    recurrent._launch_cache.clear()
    if not prefill:
        return
    launch = prefill_plan(torch.device("cuda", torch.cuda.current_device()), DTYPE, K, V, retargets_fp16_dots())
    for blocks in prefill_variants(launch.blocks, launch.arch):
        fns = prefill_case(H, HV, [8192], blocks)
        print(f"sweep prefill 1x8192 {blocks}: {gpu_time_us(fns['caovan'], 1, 5, stream=stream):.1f} us",
              flush=True)


# Launch shapes the prefill sweeps try: kernel 1's warps with kernel 2 as by default, then kernel 2's value block
# and warps with kernel 1 as by default (the two kernels are timed apart, so each variant moves one of them), then
# kernel 2's prefetch flipped, at its default warps and at 2, then those of kernel 2's forms with kernel 1 as by default
# with the outputs moved to or from a third kernel (parallel_output), and that kernel's value block and warps; last
# the walk over w and u formed ahead (wu_ahead) flipped, at kernel 2's value blocks and warps and the w/u kernel's
# warps. Kernel 2 at 2 warps is mma.sync on sm_90, where 4 is wgmma and takes no prefetch (plan.launchable).
SWEEP_WARPS1 = (1, 2, 4, 8)
SWEEP_KERNEL2 = ((16, 4), (16, 8), (32, 2), (32, 4), (32, 8), (64, 4), (64, 8))
SWEEP_KERNEL3 = ((32, 4), (64, 2), (64, 4), (64, 8), (128, 4), (128, 8))  # the output kernel's value block, warps
SWEEP_WU = ((32, 4, 4), (32, 2, 4), (64, 4, 4), (16, 4, 4), (32, 4, 2), (32, 4, 8))  # kernel 2's BV, warps; w/u's warps


def prefill_variants(default: PrefillBlocks, arch: int | None) -> list[PrefillBlocks]:
    """The sweep's launch shapes around `default` that kernel 2 can run with on `arch` (plan.launchable)."""
    variants = [dataclasses.replace(default, warps1=w) for w in SWEEP_WARPS1 if w != default.warps1]
    variants += [dataclasses.replace(default, bv=bv, warps2=w) for bv, w in SWEEP_KERNEL2
                 if (bv, w) != (default.bv, default.warps2)]
    walk = dataclasses.replace(default, wu_ahead=False)  # the walk over Ti, k and v, whose forms follow
    if default.wu_ahead:
        variants.append(walk)
    if walk.split_k == walk.bk:  # kernel 2's ahead-load of the next chunk's keys, flipped
        variants += [dataclasses.replace(walk, warps2=w, prefetch=not walk.prefetch)
                     for w in dict.fromkeys((walk.warps2, 2))]
    if walk.split_k == walk.bk:  # the outputs formed in the walk or by a third kernel, flipped, each tiling
        forms = [walk] + [v for v in variants if v.warps1 == walk.warps1 and not v.wu_ahead]
        flipped = [dataclasses.replace(b, parallel_output=not walk.parallel_output) for b in forms]
        with_k3 = walk if walk.parallel_output else flipped[0]
        variants += flipped + [dataclasses.replace(with_k3, bv3=bv, warps3=w) for bv, w in SWEEP_KERNEL3
                               if (bv, w) != (with_k3.bv3, with_k3.warps3)]
        ahead = dataclasses.replace(walk, prefetch=False, parallel_output=True, wu_ahead=True)
        variants += [dataclasses.replace(ahead, bv=bv, warps2=w2, warps_wu=ww) for bv, w2, ww in SWEEP_WU
                     if not default.wu_ahead or (bv, w2, ww) != (default.bv, default.warps2, default.warps_wu)]
    return [b for b in dict.fromkeys(variants) if b != default and launchable(b, arch)]


def _fmt_ratio(ours: float, peer: float | None) -> str:
    return "-" if peer is None else f"{peer / ours:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    parser.add_argument("--quick", action="store_true", help="TP2 only, fewer shapes")
    parser.add_argument("--sweep", action="store_true", help="time caovan block/warp choices at TP2 first")
    parser.add_argument("--decode-only", action="store_true", help="skip the prefill shapes and the prefill sweep")
    parser.add_argument("--path", choices=turing_paths.PATHS, help="code path (default: the GPU's own code)")
    parser.add_argument("--sms", type=int, help="run on this many SMs (68: a 2080 Ti's)")
    args = parser.parse_args()
    where = turing_paths.enter(args.path) if args.path else "the GPU's own code"  # before any kernel compiles
    held = sm_limit.limit(args.sms) if args.sms else None
    with torch.cuda.stream(held.stream if held else None):  # a no-op without a limit
        return _run(args, where + (f", on {held.describe()}" if held else ""), held.stream if held else None)


def _run(args: argparse.Namespace, where: str, stream: torch.cuda.Stream | None) -> int:
    if args.sweep:
        sweep(stream, prefill=not args.decode_only)
    torch.manual_seed(0)
    bw = copy_bandwidth()
    # the device's own name: on the Turing proxy get_device_name answers with the 2080 Ti it presents
    gpu = torch.cuda.get_device_properties(torch.cuda.current_device()).name
    header = (
        f"Date {datetime.date.today()}, GPU {gpu} ({where}), torch {torch.__version__}, Triton {triton.__version__}, "
        f"copy bandwidth {bw / 1e12:.2f} TB/s (read+write). Times in microseconds per call; 'x' columns are "
        f"peer time / caovan time (above 1: caovan faster)."
    )
    print(header)
    rows = ["| case | shape | impl | GPU us | eager wall us | GPU vs fla-core | GPU vs vllm | wall vs fla-core | wall vs vllm | floor us |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    tps = ["TP2"] if args.quick else ["TP1", "TP2"]
    prefill_shapes = {"1x2048": [2048], "1x8192": [8192], "1x32768": [32768], "4x8192 varlen+h0": [8192] * 4}
    if args.quick:
        prefill_shapes = {"1x32768": [32768]}
    if args.decode_only:
        prefill_shapes = {}
    for tp in tps:
        H, HV = TP[tp]
        for name, lens in prefill_shapes.items():
            fns = prefill_case(H, HV, lens)
            res = {}
            for impl, fn in fns.items():
                print(f"  {impl}:", flush=True)
                res[impl] = (gpu_time_us(fn, 1, 10, stream=stream), eager_wall_us(fn, 5))
            _rows(rows, "prefill", f"{tp} {name}", res, None)
            torch.cuda.empty_cache()
        for B in DECODE_BATCHES:
            for T in (1, 4):
                fns, state_bytes = decode_case(H, HV, B, T)
                res = {impl: (gpu_time_us(fn, 50, stream=stream), eager_wall_us(fn, 200))
                       for impl, fn in fns.items()}
                _rows(rows, "decode" if T == 1 else "verify MTP=3", f"{tp} B={B} T={T}", res, state_bytes / bw * 1e6)
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(header + "\n\n" + table + "\n")
    return 0


def _rows(rows: list[str], case: str, shape: str, res: dict[str, tuple[float, float]], floor_us: float | None) -> None:
    ours_gpu, ours_wall = res["caovan"]
    fla, vl = res.get("fla-core"), res.get("vllm")
    for impl, (g, w) in res.items():
        mine = impl == "caovan"
        rows.append(
            f"| {case} | {shape} | {impl} | {g:.1f} | {w:.1f} | "
            f"{_fmt_ratio(ours_gpu, fla[0] if fla else None) if mine else ''} | "
            f"{_fmt_ratio(ours_gpu, vl[0] if vl else None) if mine else ''} | "
            f"{_fmt_ratio(ours_wall, fla[1] if fla else None) if mine else ''} | "
            f"{_fmt_ratio(ours_wall, vl[1] if vl else None) if mine else ''} | "
            f"{'' if floor_us is None or not mine else f'{floor_us:.1f}'} |"
        )
    print("\n".join(rows[-len(res) :]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
