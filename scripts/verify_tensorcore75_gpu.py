"""TensorCore75 kernel parity on an NVIDIA GPU: vLLM's own Triton kernels on the sm_75 code path (the Turing proxy)
with Triton's FMA lowering and with TensorCore75's m16n8k8, and natively, on the same fresh random inputs, each held
to an fp32/fp64 reference.

    python scripts/verify_tensorcore75_gpu.py --out-dir DIR [--seed N] [--report FILE] [--paths native,fma,mma]

--paths runs only those children; the comparison then uses every path's results found in DIR (same seed), so the
slow FMA child (its compile of vLLM's GDN kernels takes over 8 minutes on a cold Triton cache) can run on its own,
in the background, and the comparison afterwards with `--paths ""`.

Needs CUDA vLLM (its unified attention and fla GDN kernels) and this project importable. Cases: the TRITON_ATTN
backend's unified attention (prefill through its 2D kernel, decode and MTP=3 verify through its 3D kernel and
segment reduction; head_dim 128 and 256, 12 query / 2 KV heads (GQA 6), block sizes 16 and 784), vLLM's GDN
chunked prefill (TP2: H=8, HV=24, K=V=128, two sequences with initial states) and decode/verify update; an int8
matmul through the probe kernel (Triton's own sm_75 lowering cannot compile it; TensorCore75 gives it m8n8k16).

Tolerances, against the reference computed in fp32 (attention, torch SDPA on the gathered cache) or fp64 (GDN,
caovan_kernels.gdn.reference): fp16 outputs carry 2^-11 relative rounding; attention adds online-softmax
rescaling in fp32, so |error| <= 4e-3 absolute on O(1) outputs (measured 0.00195 for all three paths at
2026-12-01); GDN outputs and final states within 2e-3 of the reference's largest magnitude (fla-core is about 1e-3
there). The int8 matmul must be exact.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ATTENTION_ABS = 4e-3
GDN_REL = 2e-3


def _child(path: str, seed: int, out: Path) -> None:
    import torch

    from lab import turing_paths, vllm_kernels

    described = turing_paths.enter(path)
    results: dict[str, torch.Tensor] = {}
    for case in vllm_kernels.attention_cases():
        inputs = vllm_kernels.attention_inputs(case, "cuda", torch.Generator().manual_seed(seed))
        results[f"attention {case.name}"] = vllm_kernels.run_unified_attention(inputs).cpu()
    gen = torch.Generator().manual_seed(seed + 1)
    prefill = vllm_kernels.gdn_prefill_inputs([1500, 613], "cuda", gen)
    o, final = vllm_kernels.run_gdn_prefill(prefill)
    results["gdn prefill out"], results["gdn prefill state"] = o.cpu(), final.cpu()
    for b, t in ((2, 1), (2, 4), (64, 4)):
        d = vllm_kernels.gdn_decode_inputs(b, t, "cuda", torch.Generator().manual_seed(seed + 2 + t))
        o, cache = vllm_kernels.run_gdn_decode(d)
        results[f"gdn decode B{b} T{t} out"], results[f"gdn decode B{b} T{t} state"] = o.cpu(), cache.cpu()
    if path != "fma":  # Triton's own sm_75 lowering fails to compile int8 dots
        results["int8 matmul"] = _int8_matmul(seed)
    torch.cuda.synchronize()
    torch.save({"described": described, "results": results}, out.with_suffix(".pt"))
    from caovan_kernels import tensorcore75

    counts = tensorcore75.process().counts()
    out.write_text(json.dumps({"described": described, "retargeted": counts.retargeted, "kept": dict(counts.kept),
                               "by_kernel": counts.by_kernel}))


def _int8_operands(seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed + 9)
    return (torch.randint(-128, 128, (64, 64), generator=gen, dtype=torch.int8),
            torch.randint(-128, 128, (64, 64), generator=gen, dtype=torch.int8))


def _int8_matmul(seed: int):
    import torch
    import triton.language as tl

    sys.path.insert(0, str(ROOT / "tests" / "sm75"))
    from probe_kernels import dot_kernel

    a, b = _int8_operands(seed)
    c = torch.full((64, 64), -1, dtype=torch.int32, device="cuda")
    dot_kernel[(1,)](a.cuda(), b.cuda(), c, BLOCK=64, ACC=tl.int32, PRECISION="tf32")
    return c.cpu()


def _attention_errors(outs: dict[str, dict], seed: int) -> list[dict]:
    import torch

    from lab import vllm_kernels

    rows = []
    for case in vllm_kernels.attention_cases():
        inputs = vllm_kernels.attention_inputs(case, "cuda", torch.Generator().manual_seed(seed))
        ref = vllm_kernels.attention_reference(inputs).cpu()
        key = f"attention {case.name}"
        row = {"case": key, "tolerance": ATTENTION_ABS}
        for path, out in outs.items():
            got = out[key].float()
            row[path] = float("inf") if torch.isnan(got).any() else (got - ref).abs().max().item()
        row["mma_vs_fma"] = (outs["mma"][key].float() - outs["fma"][key].float()).abs().max().item()
        row["ok"] = all(row[p] <= ATTENTION_ABS for p in outs) and row["mma_vs_fma"] <= ATTENTION_ABS
        rows.append(row)
    return rows


def _gdn_errors(outs: dict[str, dict], seed: int) -> list[dict]:
    import torch

    from caovan_kernels.gdn.reference import chunked_gated_delta_rule
    from lab import vllm_kernels

    p = vllm_kernels.gdn_prefill_inputs([1500, 613], "cuda", torch.Generator().manual_seed(seed + 1))
    refs_o, refs_s = [], []
    bounds = p.cu_seqlens.tolist()
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        o, s = chunked_gated_delta_rule(p.q[0, lo:hi], p.k[0, lo:hi], p.v[0, lo:hi], p.g[0, lo:hi], p.beta[0, lo:hi],
                                        scale=p.q.shape[-1] ** -0.5, initial_state=p.h0[i].transpose(-1, -2))
        refs_o.append(o)
        refs_s.append(s.transpose(-1, -2))  # vLLM's [V, K] state layout
    references = {"gdn prefill out": torch.cat(refs_o)[None].cpu(), "gdn prefill state": torch.stack(refs_s).cpu()}
    rows = []
    for key, ref in references.items():
        scale = ref.abs().max().item()
        row = {"case": key, "tolerance": GDN_REL}
        for path, out in outs.items():
            row[path] = (out[key].double() - ref).abs().max().item() / scale
        row["mma_vs_fma"] = (outs["mma"][key].double() - outs["fma"][key].double()).abs().max().item() / scale
        row["ok"] = all(row[path] <= GDN_REL for path in outs)
        rows.append(row)
    # decode/verify: no dots (the same kernel on both sm_75 paths); held to the native path and to each other
    for key in sorted(k for k in outs["native"] if k.startswith("gdn decode")):
        base = outs["native"][key].double()
        scale = base.abs().max().item()
        row = {"case": key, "tolerance": GDN_REL, "native": 0.0}
        for path in ("fma", "mma"):
            row[path] = (outs[path][key].double() - base).abs().max().item() / scale
        row["mma_vs_fma"] = (outs["mma"][key].double() - outs["fma"][key].double()).abs().max().item() / scale
        row["ok"] = row["fma"] <= GDN_REL and row["mma"] <= GDN_REL
        rows.append(row)
    return rows


def _int8_row(outs: dict[str, dict], seed: int) -> dict:
    a, b = _int8_operands(seed)
    exact = a.int() @ b.int()
    mismatches = {p: int((outs[p]["int8 matmul"] != exact).sum()) for p in ("native", "mma")}
    return {"case": "int8 matmul 64x64x64", "tolerance": 0, **mismatches, "fma": "does not compile",
            "ok": all(v == 0 for v in mismatches.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CAOVAN_TEST_SEED", "0")) or None)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--paths", default="native,fma,mma", help="children to run now (comma-separated)")
    opts = parser.parse_args()
    seed = opts.seed or int.from_bytes(os.urandom(3), "little")
    if opts.path:
        _child(opts.path, seed, opts.out)
        return 0
    from lab import turing_paths

    try:
        todo = turing_paths.chosen(opts.paths)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"seed={seed} (replay: --seed {seed})", flush=True)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor

    # the three paths at once: correctness only here, and each child spends most of its time compiling on the CPU
    with ThreadPoolExecutor(max(1, len(todo))) as pool:
        futures = [pool.submit(turing_paths.run_child, Path(__file__), path, ["--seed", str(seed)],
                               opts.out_dir / f"{path}.json", 1800) for path in todo]
        for future in futures:
            future.result()
    missing = [p for p in turing_paths.PATHS if not (opts.out_dir / f"{p}.pt").exists()]
    if missing:
        print(f"results of {', '.join(missing)} not in {opts.out_dir} yet: run them with --paths and this seed")
        return 2
    meta = {p: json.loads((opts.out_dir / f"{p}.json").read_text()) for p in turing_paths.PATHS}
    import torch
    import triton
    import vllm

    outs = {p: torch.load(opts.out_dir / f"{p}.pt")["results"] for p in turing_paths.PATHS}
    rows = _attention_errors(outs, seed) + _gdn_errors(outs, seed) + [_int8_row(outs, seed)]
    ok = all(r["ok"] for r in rows)
    lines = [
        f"## TensorCore75 kernel parity ({datetime.date.today().isoformat()}, seed {seed})", "",
        f"- {torch.cuda.get_device_name(0)}, vLLM {vllm.__version__}, torch {torch.__version__}, Triton "
        f"{triton.__version__}; paths: " + "; ".join(f"{p}: {m['described']}" for p, m in meta.items()),
        f"- kernels compiled on the mma path: {meta['mma']['retargeted']} retargeted, kept {meta['mma']['kept']}",
        "", "| case | native | sm_75 FMA | sm_75 mma | mma vs FMA | tolerance | ok |", "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.get(p, "-") for p in ("native", "fma", "mma", "mma_vs_fma")]
        fmt = [f"{c:.2e}" if isinstance(c, float) else str(c) for c in cells]
        lines.append(f"| {r['case']} | {' | '.join(fmt)} | {r['tolerance']} | {'yes' if r['ok'] else 'NO'} |")
    lines += ["", f"- result: {'PASS' if ok else 'FAIL'}", ""]
    report = "\n".join(lines)
    print(report)
    if opts.report:
        opts.report.write_text(report)
    (opts.out_dir / "parity.json").write_text(json.dumps({"seed": seed, "rows": rows, "paths": meta}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
