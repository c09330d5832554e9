"""The sm_75 code path on an NVIDIA GPU (the Turing proxy), with and without TensorCore75, against native code.

    python benchmarks/turing_bench.py [--out FILE] [--quick]

Cases at Qwen3.6-27B's TP2 shapes in fp16: vLLM's unified attention (TRITON_ATTN backend) prefilling one sequence
of 2k, 8k and 32k tokens (12 query heads, 2 KV heads, head_dim 256, vLLM's 784-token blocks for this model), and
GDN prefill (H=8, HV=24, K=V=128) of 1x8k, 1x32k and 4x8k tokens through vLLM's chunk_gated_delta_rule and
Caovan's GDNCore. Each path runs in its own process (caovan_kernels/turing/paths.py): native, sm_75 with Triton's
FMA lowering, sm_75 with TensorCore75. GPU time per call is the median over CUDA-graph replays (events around
eager calls where a graph cannot be captured). Only the ratios between columns carry over to a 2080 Ti.
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


def _cases(quick: bool, only: str) -> dict[str, object]:
    import torch

    from caovan_kernels import gdn
    from caovan_kernels.turing import vllm_kernels as vk

    gen = torch.Generator().manual_seed(0)
    cases: dict[str, object] = {}
    for n in () if only == "gdn" else ATTENTION_TOKENS[:2] if quick else ATTENTION_TOKENS:
        case = vk.AttentionCase(f"{n}", (n,), (0,), 256, block_size=vk.QWEN36_TP2_BLOCK)
        inputs = vk.attention_inputs(case, "cuda", gen)
        cases[f"attention prefill {n // 1024}k"] = lambda inputs=inputs: vk.run_unified_attention(inputs)
    for name, lens in () if only == "attention" else list(GDN_LENS.items())[:1] if quick else GDN_LENS.items():
        p = vk.gdn_prefill_inputs(lens, "cuda", gen)
        h0_kv = p.h0.transpose(-1, -2).contiguous()
        cu32 = p.cu_seqlens.to(torch.int32)
        cases[f"gdn prefill {name} vLLM"] = lambda p=p: vk.run_gdn_prefill(p)
        cases[f"gdn prefill {name} GDNCore"] = lambda p=p, h0=h0_kv, cu=cu32: gdn.chunk_gated_delta_rule(
            p.q, p.k, p.v, p.g, p.beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    return cases


def _child(path: str, quick: bool, only: str, out: Path) -> None:
    from gdn_bench import gpu_time_us

    from caovan_kernels import tensorcore75
    from caovan_kernels.turing import paths

    described = paths.enter(path)
    times = {}
    for name, fn in _cases(quick, only).items():
        fn()  # compile and autotune outside the timing
        times[name] = gpu_time_us(fn, calls_per_graph=2, replays=5) / 1000.0
        print(f"  [{path}] {name}: {times[name]:.3f} ms", file=sys.stderr, flush=True)
    counts = tensorcore75.process().counts()
    out.write_text(json.dumps({"described": described, "ms": times, "retargeted": counts.retargeted,
                               "kept": dict(counts.kept)}))


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
    opts = parser.parse_args()
    if opts.path:
        _child(opts.path, opts.quick, opts.only, opts.out)
        return 0
    import tempfile

    import torch
    import triton

    from caovan_kernels.turing import paths

    tmp = Path(tempfile.mkdtemp(prefix="turing-bench-"))
    extra = (["--quick"] if opts.quick else []) + ["--only", opts.only]
    runs = {p: paths.run_child(Path(__file__), p, extra, tmp / f"{p}.json", 1800) for p in paths.PATHS}
    try:
        import vllm

        vllm_version = vllm.__version__
    except ImportError:
        vllm_version = "not importable"
    lines = [
        f"## Turing proxy: sm_75 code path with and without TensorCore75 ({datetime.date.today().isoformat()})", "",
        f"{torch.cuda.get_device_name(0)}, vLLM {vllm_version}, torch {torch.__version__}, Triton {triton.__version__}."
        " GPU ms per call (median of CUDA-graph replays); TFLOP/s for attention counts the causal half.", "",
        "| case | native sm_90 | sm_75 FMA (Triton) | sm_75 mma (TensorCore75) | mma speed-up over FMA | mma / native |",
        "|---|---|---|---|---|---|",
    ]
    for name in runs["native"]["ms"]:
        native, fma, mma = (runs[p]["ms"][name] for p in paths.PATHS)
        tf = (f" ({_attention_tflops(name, native)} / {_attention_tflops(name, fma)} / {_attention_tflops(name, mma)}"
              " TFLOP/s)") if name.startswith("attention") else ""
        lines.append(f"| {name}{tf} | {native:.3f} | {fma:.3f} | {mma:.3f} | {fma / mma:.2f}x | {mma / native:.2f}x |")
    lines += ["", f"Kernels compiled on the mma path: {runs['mma']['retargeted']} retargeted, kept "
              f"{runs['mma']['kept']}.", ""]
    report = "\n".join(lines)
    print(report)
    if opts.out:
        opts.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
