"""Where the GDN prefill's GPU time goes, kernel by kernel: GDNCore beside fla-core's and vLLM's kernels.

    python benchmarks/gdn_breakdown.py [--paths native,mma] [--shapes 1x8192,4x8192] [--out FILE] [--sweep]
                                       [--sms 68]

For each code path (lab/turing_paths.py: native, the Turing proxy with Triton's FMA lowering, the proxy
with TensorCore75), one child process profiles each implementation at Qwen3.6-27B's TP2 GDN shape (H=8, HV=24,
K=V=128, fp16, initial states in, final states out) with torch.profiler and prints each kernel's mean GPU time per
call. fla-core (`fla`) and vLLM's kernels are used when importable (neither is a dependency). The totals include no
launch gaps; benchmarks/turing_bench.py gives the end-to-end time per call. `--sweep` adds GDNCore under other launch
shapes (warps of kernel 1; value block and warps of kernel 2) on each path: what its defaults should be there.
`--sms 68` runs on a 2080 Ti's number of SMs (lab/sm_limit.py), where kernel 2's programs for one
sequence take more waves than on the GPU's own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {"1x8192": [8192], "1x32768": [32768], "4x8192": [8192] * 4}
CALLS = 10


def _implementations(lens: list[int], sweep: bool) -> dict[str, Callable[[], object]]:
    import torch
    from gdn_bench import prefill_variants

    from caovan_kernels import gdn
    from caovan_kernels.gdn.plan import prefill_plan
    from caovan_kernels.tensorcore75 import retargets_fp16_dots
    from lab import vllm_kernels

    p = vllm_kernels.gdn_prefill_inputs(lens, "cuda", torch.Generator().manual_seed(0))
    h0_kv = p.h0.transpose(-1, -2).contiguous()
    cu32 = p.cu_seqlens.to(torch.int32)

    def gdncore(blocks: object = None) -> Callable[[], object]:
        return lambda: gdn.chunk_gated_delta_rule(p.q, p.k, p.v, p.g, p.beta, initial_state=h0_kv,
                                                  output_final_state=True, cu_seqlens=cu32, blocks=blocks)

    impls: dict[str, Callable[[], object]] = {"GDNCore": gdncore()}
    if sweep:
        K, V = p.q.shape[-1], p.v.shape[-1]
        launch = prefill_plan(p.q.device, p.q.dtype, K, V, retargets_fp16_dots())
        for blocks in prefill_variants(launch.blocks, launch.arch):
            impls[f"GDNCore k1 w{blocks.warps1}, k2 BV={blocks.bv} w{blocks.warps2}{' pf' if blocks.prefetch else ''}"
                  f"{f', k3 BV={blocks.bv3} w{blocks.warps3}' if blocks.parallel_output else ''}"
                  f"{f', wu w{blocks.warps_wu}' if blocks.wu_ahead else ''}"] = gdncore(blocks)
    try:
        import fla.ops.gated_delta_rule as fla
        from fla.ops.utils import prepare_chunk_indices

        chunks = prepare_chunk_indices(p.cu_seqlens, 64)
        impls["fla-core"] = lambda: fla.chunk_gated_delta_rule(
            p.q, p.k, p.v, p.g, p.beta, initial_state=h0_kv, output_final_state=True, cu_seqlens=p.cu_seqlens,
            cu_seqlens_cpu=p.cu_seqlens.cpu(), chunk_indices=chunks)
    except Exception as exc:  # a peer that does not import is reported, not faked
        print(f"fla-core not importable ({exc!r})", file=sys.stderr)
    try:
        vllm_kernels.gdn_ops()
        impls["vLLM"] = lambda: vllm_kernels.run_gdn_prefill(p)
    except Exception as exc:
        print(f"vLLM's GDN kernels not importable ({exc!r})", file=sys.stderr)
    return impls


def _profile(fn: Callable[[], object]) -> dict[str, float]:
    """Mean GPU microseconds per call, by kernel name, over CALLS calls after a warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type.name == "CUDA":
            per_kernel[event.name[:60]] += event.device_time / CALLS
    return dict(per_kernel)


def _child(path: str, shapes: list[str], only: str | None, plain: bool, sweep: bool, sms: int | None,
           out: Path) -> None:
    import torch

    from lab import sm_limit, turing_paths

    described = turing_paths.enter(path)
    held = sm_limit.limit(sms) if sms else None
    if held:
        described += f", on {held.describe()}"
    print(f"[{path}] {described}", file=sys.stderr, flush=True)
    with torch.cuda.stream(held.stream if held else None):  # no-op without a limit
        _profile_shapes(path, shapes, only, plain, sweep, out)


def _profile_shapes(path: str, shapes: list[str], only: str | None, plain: bool, sweep: bool, out: Path) -> None:
    result: dict[str, dict[str, dict[str, float]]] = {}
    for shape in shapes:
        reference = None
        for impl, fn in _implementations(SHAPES[shape], sweep).items():
            if only and impl != only:
                continue
            if impl.startswith("GDNCore"):  # every launch shape must compute the same: checked against the default's
                output = fn()[0].float()
                if reference is None:
                    reference = output
                else:
                    diff = ((output - reference).norm() / reference.norm()).item()
                    print(f"[{path}] {shape} {impl}: output differs from the default's by {diff:.1e} (relative L2)",
                          file=sys.stderr, flush=True)
            if plain:  # for an outside profiler (ncu): calls only, torch's profiler would compete for the counters
                for _ in range(3 + CALLS):
                    fn()
                continue
            result[f"{shape} {impl}"] = _profile(fn)
            out.write_text(json.dumps(result))
    out.write_text(json.dumps(result))


def table(path: str, result: dict[str, dict[str, float]]) -> str:
    lines = [f"## {path}"]
    for case, kernels in result.items():
        total = sum(kernels.values())
        lines.append(f"{case}: {total:.1f} us of kernels")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {us:9.1f} us  {100 * us / total:5.1f}%  {name}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--paths", default="native,mma", help="code paths, comma-separated (native, fma, mma)")
    parser.add_argument("--shapes", default="1x8192,4x8192", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--out", type=Path, help="JSON of every path's breakdown")
    parser.add_argument("--only", help="one implementation (GDNCore, fla-core, vLLM)")
    parser.add_argument("--plain", action="store_true", help="run the calls without torch's profiler (for ncu)")
    parser.add_argument("--sweep", action="store_true", help="GDNCore under other launch shapes too")
    parser.add_argument("--sms", type=int, help="run on this many SMs (68: a 2080 Ti's; lab/sm_limit.py)")
    opts = parser.parse_args()
    shapes = [s for s in opts.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if opts.path:
        _child(opts.path, shapes, opts.only, opts.plain, opts.sweep, opts.sms, opts.out)
        return 0
    from lab import turing_paths

    results = {}
    for path in turing_paths.chosen(opts.paths):
        out = Path(f"/tmp/gdn_breakdown_{path}.json")
        extra = ["--shapes", ",".join(shapes)] + (["--only", opts.only] if opts.only else []) + \
            (["--plain"] if opts.plain else []) + (["--sweep"] if opts.sweep else []) + \
            (["--sms", str(opts.sms)] if opts.sms else [])
        results[path] = turing_paths.run_child(Path(__file__), path, extra, out, 1800)
        print(table(path, results[path]), flush=True)
    if opts.out:
        opts.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
