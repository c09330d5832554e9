"""The sm_75 code path on an NVIDIA GPU (the Turing proxy), with and without TensorCore75, against native code.

    python benchmarks/turing_bench.py [--out FILE] [--quick] [--only attention|gdn] [--work-dir DIR --paths P,..]
                                      [--sms 68]

Cases at Qwen3.6-27B's TP2 shapes in fp16: vLLM's unified attention (TRITON_ATTN backend) prefilling one sequence
of 2k, 8k and 32k tokens (12 query heads, 2 KV heads, head_dim 256, vLLM's 784-token blocks for this model), and
GDN prefill (H=8, HV=24, K=V=128) of 1x8k, 1x32k and 4x8k tokens through vLLM's chunk_gated_delta_rule, fla-core's
(when `fla` imports: it is no dependency, put it on PYTHONPATH for the run) and Caovan's GDNCore, and GDN decode and
MTP=3 verify steps (B=2 T=4, B=64 T=1 and T=4) through vLLM's fused_sigmoid_gating_delta_rule_update and GDNCore's.
Each path runs in its own process (lab/turing_paths.py): native, sm_75 with Triton's FMA lowering,
sm_75 with TensorCore75. `--paths` runs only some of them, keeping each one's result in `--work-dir`; the table is
made once every path's result is there (the FMA path's compiles and autotuning of vLLM's GDN kernels can take longer than
one sitting: run it apart, then again with `--paths ""`). GPU time per call is the median over CUDA-graph replays
(events around eager calls where a graph cannot be captured). Only the ratios between columns carry over to a 2080
Ti. `--sms 68` runs every path on a 2080 Ti's number of SMs (a CUDA green context, lab/sm_limit.py),
so that launches which take more waves on its 68 SMs than on the GPU's own do so here too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ATTENTION_TOKENS = (2048, 8192, 32768)
GDN_LENS = {"1x8192": [8192], "1x32768": [32768], "4x8192": [8192] * 4}
# Decode (T=1) and MTP=3 verify (T=4) steps of B requests: the 2080 Ti profile's batch and a full one.
GDN_STEPS = ((2, 4), (64, 1), (64, 4))
STEP_CALLS_PER_GRAPH = 20  # a step takes microseconds: more calls per replay for a steady median


def _cases(quick: bool, only: str) -> dict[str, object]:
    import torch

    from caovan_kernels import gdn
    from lab import vllm_kernels

    gen = torch.Generator().manual_seed(0)
    cases: dict[str, object] = {}
    fla = fla_chunk_indices = None
    if only != "attention":
        try:
            import fla.ops.gated_delta_rule as fla
            from fla.ops.utils import prepare_chunk_indices as fla_chunk_indices
        except Exception as exc:  # a peer that does not import is reported, not faked
            print(f"fla-core not importable ({exc}); its rows are left out", file=sys.stderr)
    for n in () if only == "gdn" else ATTENTION_TOKENS[:2] if quick else ATTENTION_TOKENS:
        case = vllm_kernels.AttentionCase(f"{n}", (n,), (0,), 256, block_size=vllm_kernels.QWEN36_TP2_BLOCK)
        inputs = vllm_kernels.attention_inputs(case, "cuda", gen)
        cases[f"attention prefill {n // 1024}k"] = lambda inputs=inputs: vllm_kernels.run_unified_attention(inputs)
    shapes = {}
    for name, lens in () if only == "attention" else list(GDN_LENS.items())[:1] if quick else GDN_LENS.items():
        p = vllm_kernels.gdn_prefill_inputs(lens, "cuda", gen)
        shapes[name] = (p, p.h0.transpose(-1, -2).contiguous(), p.cu_seqlens.to(torch.int32))  # h0 as [K, V]
    # GDNCore, fla-core, then vLLM: on the FMA path vLLM's autotuning takes longest, and a child stopped early
    # keeps what it measured
    for name, (p, h0_kv, cu32) in shapes.items():
        cases[f"gdn prefill {name} GDNCore"] = lambda p=p, h0=h0_kv, cu=cu32: gdn.chunk_gated_delta_rule(
            p.q, p.k, p.v, p.g, p.beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    for name, (p, h0_kv, _) in shapes.items() if fla is not None else ():  # fla keeps [K, V] states too
        chunks = fla_chunk_indices(p.cu_seqlens, 64)
        cases[f"gdn prefill {name} fla-core"] = lambda p=p, h0=h0_kv, ci=chunks: fla.chunk_gated_delta_rule(
            p.q, p.k, p.v, p.g, p.beta, initial_state=h0, output_final_state=True, cu_seqlens=p.cu_seqlens,
            cu_seqlens_cpu=p.cu_seqlens.cpu(), chunk_indices=ci)
    for name, (p, _, _) in shapes.items():
        cases[f"gdn prefill {name} vLLM"] = lambda p=p: vllm_kernels.run_gdn_prefill(p)
    for B, T in () if only == "attention" else GDN_STEPS:
        # One input set per implementation: each updates its slot cache in place, and neither may feed the other.
        ours, theirs = (vllm_kernels.gdn_decode_inputs(B, T, "cuda", torch.Generator().manual_seed(B * 10 + T))
                        for _ in "12")
        out = torch.empty_like(ours.v)
        cases[f"gdn step B={B} T={T} GDNCore"] = lambda d=ours, out=out: gdn.fused_sigmoid_gating_delta_rule_update(
            d.A_log, d.a, d.b, d.dt_bias, d.q, d.k, d.v, initial_state=d.cache, cu_seqlens=d.cu_seqlens,
            ssm_state_indices=d.slots, num_accepted_tokens=d.accepted, use_qk_l2norm_in_kernel=True, out=out)
        cases[f"gdn step B={B} T={T} vLLM"] = lambda d=theirs: vllm_kernels.run_gdn_decode(d)
    return cases


def _child(path: str, quick: bool, only: str, sms: int | None, out: Path) -> None:
    import torch
    from gdn_bench import gpu_time_us

    from caovan_kernels import tensorcore75
    from lab import sm_limit, turing_paths

    described = turing_paths.enter(path)
    held = sm_limit.limit(sms) if sms else None
    stream = held.stream if held else None
    if held:
        described += f", on {held.describe()}"
    times = {}
    with torch.cuda.stream(stream):  # inputs, compiles and timings on the held SMs (no-op without a limit)
        for name, fn in _cases(quick, only).items():
            fn()  # compile and autotune outside the timing
            calls = STEP_CALLS_PER_GRAPH if name.startswith("gdn step") else 2
            times[name] = gpu_time_us(fn, calls_per_graph=calls, replays=5, stream=stream) / 1000.0
            print(f"  [{path}] {name}: {times[name]:.3f} ms", file=sys.stderr, flush=True)
            counts = tensorcore75.process().counts()
            partial = out.with_suffix(".part")  # rewritten after each case, renamed whole
            partial.write_text(json.dumps({"described": described, "ms": times, "retargeted": counts.retargeted,
                                           "kept": dict(counts.kept)}))
            partial.replace(out)


def _attention_tflops(name: str, ms: float) -> str:
    n = int(name.split()[-1].rstrip("k")) * 1024
    flops = 2 * 2 * 12 * 256 * n * n / 2  # QK^T and PV, causal half, 12 query heads
    return f"{flops / (ms * 1e-3) / 1e12:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="2k/8k attention and 1x8k GDN only")
    parser.add_argument("--only", choices=("all", "attention", "gdn"), default="all")
    parser.add_argument("--paths", default="native,fma,mma", help="paths to run now (comma-separated)")
    parser.add_argument("--work-dir", type=Path, help="keep each path's result here (default: a fresh folder)")
    parser.add_argument("--sms", type=int, help="run every path on this many SMs (68: a 2080 Ti's; lab/sm_limit.py)")
    opts = parser.parse_args()
    if opts.path:
        _child(opts.path, opts.quick, opts.only, opts.sms, opts.out)
        return 0
    import tempfile

    import torch
    import triton

    from lab import turing_paths

    work = opts.work_dir or Path(tempfile.mkdtemp(prefix="turing-bench-"))
    extra = (["--quick"] if opts.quick else []) + ["--only", opts.only] + (["--sms", str(opts.sms)] if opts.sms else [])
    try:
        runs = turing_paths.run_paths(Path(__file__), opts.paths, extra, work, 1800)
    except ValueError as exc:
        parser.error(str(exc))
    if "native" not in runs:
        print(f"no native result in {work}: every row is held to it; run --paths native --work-dir {work}")
        return 1
    try:
        import vllm

        vllm_version = vllm.__version__
    except ImportError:
        vllm_version = "not importable"
    missing = [p for p in turing_paths.PATHS if p not in runs]
    lines = [
        f"## Turing proxy: sm_75 code path with and without TensorCore75 ({datetime.date.today().isoformat()})", "",
        f"{torch.cuda.get_device_name(0)}, vLLM {vllm_version}, torch {torch.__version__}, Triton {triton.__version__}."
        " GPU ms per call (median of CUDA-graph replays); TFLOP/s for attention counts the causal half."
        + (f" Not measured (-): {', '.join(missing)} path, or its cases that had not finished." if missing else ""),
        "", *(f"- {p}: {run['described']}" for p, run in runs.items()), "",
        "| case | native sm_90 | sm_75 FMA (Triton) | sm_75 mma (TensorCore75) | mma speed-up over FMA | mma / native |",
        "|---|---|---|---|---|---|",
    ]

    def ms(path: str, name: str) -> float | None:
        return runs.get(path, {}).get("ms", {}).get(name)

    def cell(value: float | None, form: str = "{:.3f}") -> str:
        return "-" if value is None else form.format(value)

    for name in (n for n in runs["native"]["ms"] if not n.startswith("gdn step")):  # steps: their own table
        native, fma, mma = (ms(p, name) for p in turing_paths.PATHS)
        tf = (f" ({' / '.join('-' if t is None else _attention_tflops(name, t) for t in (native, fma, mma))}"
              " TFLOP/s)") if name.startswith("attention") else ""
        lines.append(f"| {name}{tf} | {cell(native)} | {cell(fma)} | {cell(mma)} | "
                     f"{cell(fma / mma if fma and mma else None, '{:.2f}x')} | "
                     f"{cell(mma / native if mma else None, '{:.2f}x')} |")
    def versus(keys: list[str], impls: tuple[str, ...], scale: float, form: str) -> list[str]:
        """A row per case and path: each implementation's time, then each peer's over GDNCore's (first in impls)."""
        rows = []
        for key in keys:
            for path in turing_paths.PATHS:
                times = [ms(path, f"{key} {impl}") for impl in impls]
                ours = times[0]
                rows.append(f"| {key.split(' ', 2)[2]} | {path} | "
                            + " | ".join(cell(None if t is None else t * scale, form) for t in times) + " | "
                            + " | ".join(cell(t / ours if ours and t else None, "{:.2f}x") for t in times[1:]) + " |")
        return rows

    shapes = [f"gdn prefill {n}" for n in GDN_LENS if f"gdn prefill {n} GDNCore" in runs["native"]["ms"]]
    if shapes:
        lines += ["", "GDN prefill, GDNCore against its peers on each path (peer time / GDNCore time: above 1 means "
                  "GDNCore is faster):", "", "| shape | path | GDNCore ms | vLLM ms | fla-core ms | vs vLLM | vs fla-core |",
                  "|---|---|---|---|---|---|---|"]
        lines += versus(shapes, ("GDNCore", "vLLM", "fla-core"), 1.0, "{:.3f}")
    steps = [f"gdn step B={B} T={T}" for B, T in GDN_STEPS if f"gdn step B={B} T={T} GDNCore" in runs["native"]["ms"]]
    if steps:
        lines += ["", "GDN decode (T=1) and MTP=3 verify (T=4) steps, GPU microseconds per call (vLLM time / GDNCore "
                  "time: above 1 means GDNCore is faster):", "", "| step | path | GDNCore us | vLLM us | vs vLLM |",
                  "|---|---|---|---|---|"]
        lines += versus(steps, ("GDNCore", "vLLM"), 1000.0, "{:.1f}")
    if "mma" in runs:
        lines += ["", f"Kernels compiled on the mma path: {runs['mma']['retargeted']} retargeted, kept "
                  f"{runs['mma']['kept']}.", ""]
    report = "\n".join(lines)
    print(report)
    if opts.out:
        opts.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
