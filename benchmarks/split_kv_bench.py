"""The MTP verify's attention by context length: Caovan's split-KV kernel against vLLM's Triton attention (the 2D
launch vLLM takes for 2+ query tokens, the 3D split launch it takes for one) and, natively, FlashAttention's
split-KV decode (vLLM's bundled FA3), side by side in one process per code path.

    python benchmarks/split_kv_bench.py [--paths native,mma] [--sms 72] [--quick] [--sweep] [--out FILE]
                                        [--work-dir DIR]

One TP2 rank of Qwen3.6-27B's attention in fp16: 12 query heads over 2 KV heads, head_dim 256, vLLM's 784-token
blocks for that model, the block table shuffled. Cases: contexts 4k to 256k at 4 query tokens (MTP=3) for 1 and
4 sequences, and 1 to 5 query tokens at 64k. Each implementation's output is held to the float64 reference at the
shortest context and to Caovan's at the others (the largest relative L2 difference is printed); the `vLLM 3D`
column forces vLLM's split launch on 2+ query tokens, which vLLM itself never does (its error is printed too).

Paths (lab/turing_paths.py): native (the GPU's own code) and mma (the Turing proxy with TensorCore75: what a 2080 Ti
runs with Caovan, vLLM's kernel retargeted too); fma (Triton's FMA dots, a stock 2080 Ti) on request. `--sms 72`
holds every path to that many SMs (a CUDA green context, lab/sm_limit.py: a split's gain depends on how many SMs it
has to fill; 72 is the green-context granule nearest a 2080 Ti's 68) and plans the split for that many. `--sweep`
adds launch variants of the split kernel at 64k and 4k. GPU time per call: median of CUDA-graph replays.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

HEADS_Q, HEADS_KV, HEAD_DIM, BLOCK = 12, 2, 256, 784
CONTEXTS = (4096, 16384, 32768, 65536, 131072, 262144)
QUICK_CONTEXTS = (4096, 32768, 65536)
QUERY_LENS = (1, 2, 3, 4, 5)
BATCHES = (1, 4)
IMPLS = ("Caovan split-KV", "vLLM (as it launches)", "vLLM 3D forced", "FlashAttention")
CALLS_PER_GRAPH = 10


def cases(quick: bool) -> list[tuple[int, int, int]]:
    """(batch, query tokens, context) in report order: the context sweep at MTP=3, then the query sweep at 64k."""
    contexts = QUICK_CONTEXTS if quick else CONTEXTS
    sweep = [(b, 4, n) for b in BATCHES for n in contexts]
    return sweep + [(b, q, 65536) for b in BATCHES for q in QUERY_LENS if (b, q, 65536) not in sweep]


@dataclasses.dataclass
class Inputs:
    q: object
    key_cache: object
    value_cache: object
    block_table: object
    seq_lens: object
    cu: object


def make_inputs(batch: int, query_len: int, context: int, gen: object) -> Inputs:
    import torch

    blocks_per_seq = -(-context // BLOCK)
    pool = batch * blocks_per_seq + 1  # block 0 unused, as vLLM's null block
    shape = (pool, BLOCK, HEADS_KV, HEAD_DIM)
    key_cache = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float16)
    value_cache = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float16)
    order = torch.randperm(pool - 1, generator=gen, device="cuda").int() + 1
    table = order.view(batch, blocks_per_seq)
    q = torch.randn((batch * query_len, HEADS_Q, HEAD_DIM), generator=gen, device="cuda", dtype=torch.float16)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    cu = torch.arange(0, batch * query_len + 1, query_len, dtype=torch.int32, device="cuda")
    return Inputs(q, key_cache, value_cache, table, seq_lens, cu)


def _ours(x: Inputs, launch: object, min_tokens: int) -> object:
    import torch

    from caovan_kernels.attention import plan
    from caovan_kernels.attention.split_kv import SplitWorkspace, split_kv_attention

    batch = x.seq_lens.numel()
    rows = plan.rows_for(x.q.shape[0] // batch, HEADS_Q // HEADS_KV)
    workspace = SplitWorkspace.allocate(launch.programs(batch, HEADS_KV), rows, HEAD_DIM, x.q.device)
    out = torch.full_like(x.q, float("nan"))

    def call() -> object:
        return split_kv_attention(x.q, x.key_cache, x.value_cache, x.block_table, x.seq_lens, x.cu,
                                  HEAD_DIM ** -0.5, out, launch, workspace, max(1, min_tokens // launch.tile))
    return call


def _vllm(x: Inputs, force_3d: bool) -> object:
    import torch

    from lab import vllm_kernels

    batch = x.seq_lens.numel()
    query_len = x.q.shape[0] // batch
    threshold = vllm_kernels.MIN_LAUNCH_GRID_SIZE_2D // HEADS_KV
    segments = vllm_kernels.NUM_PAR_SOFTMAX_SEGMENTS
    descale = torch.ones(1, dtype=torch.float32, device="cuda").expand(batch, HEADS_KV)
    buffers = dict(
        softmax_segm_output=torch.empty(threshold, HEADS_Q, segments, HEAD_DIM, dtype=torch.float32, device="cuda"),
        softmax_segm_max=torch.empty(threshold, HEADS_Q, segments, dtype=torch.float32, device="cuda"),
        softmax_segm_expsum=torch.empty(threshold, HEADS_Q, segments, dtype=torch.float32, device="cuda"),
    )
    out = torch.full_like(x.q, float("nan"))
    fn = vllm_kernels.unified_attention_fn()

    def call() -> object:
        fn(q=x.q, k=x.key_cache, v=x.value_cache, out=out, cu_seqlens_q=x.cu,
           max_seqlen_q=1 if force_3d else query_len, seqused_k=x.seq_lens, max_seqlen_k=int(x.seq_lens.max()),
           softmax_scale=HEAD_DIM ** -0.5, causal=True, window_size=(-1, -1), block_table=x.block_table, softcap=0,
           q_descale=None, k_descale=descale, v_descale=descale, seq_threshold_3D=threshold,
           num_par_softmax_segments=segments, **buffers)
        return out
    return call


def _flash(x: Inputs) -> object | None:
    import torch

    try:
        from vllm.vllm_flash_attn import flash_attn_varlen_func
    except Exception as exc:  # a peer that does not import is reported, not faked
        print(f"  [FlashAttention not importable: {type(exc).__name__}: {exc}]", file=sys.stderr)
        return None
    batch = x.seq_lens.numel()
    out = torch.full_like(x.q, float("nan"))
    max_k = int(x.seq_lens.max())

    def call() -> object:
        # vLLM's FLASH_ATTN decode call: paged KV, FA3's own split heuristic (num_splits=0)
        flash_attn_varlen_func(q=x.q, k=x.key_cache, v=x.value_cache, out=out, cu_seqlens_q=x.cu,
                               max_seqlen_q=x.q.shape[0] // batch, seqused_k=x.seq_lens, max_seqlen_k=max_k,
                               softmax_scale=HEAD_DIM ** -0.5, causal=True, block_table=x.block_table, fa_version=3)
        return out
    return call


def _child(path: str, quick: bool, sweep: bool, sms: int | None, out: Path) -> None:
    import torch
    from gdn_bench import gpu_time_us

    from caovan_kernels.attention import plan, reference
    from caovan_kernels.gdn.accuracy import rel_err
    from lab import sm_limit, turing_paths

    described = turing_paths.enter(path)
    held = sm_limit.limit(sms) if sms else None
    stream = held.stream if held else None
    plan_sms = sms or torch.cuda.get_device_properties(0).multi_processor_count
    tensor_cores = path != "fma"
    if held:
        described += f", on {held.describe()}"
    result: dict = {"described": described, "sms": plan_sms, "ms": {}, "err": {}, "launch": {}, "sweep": {}}

    def save() -> None:
        partial = out.with_suffix(".part")  # rewritten after each case, renamed whole
        partial.write_text(json.dumps(result))
        partial.replace(out)

    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.cuda.stream(stream):
        for batch, query_len, context in cases(quick):
            key = f"b{batch} q{query_len} {context // 1024}k"
            x = make_inputs(batch, query_len, context, gen)
            launch = plan.plan_launch(batch, HEADS_KV, HEADS_Q // HEADS_KV, max(query_len, plan.MIN_QUERY_LEN),
                                      plan_sms, tensor_cores)
            result["launch"][key] = dataclasses.asdict(launch)
            calls = {IMPLS[0]: _ours(x, launch, plan.MIN_TOKENS_PER_SPLIT), IMPLS[1]: _vllm(x, False)}
            if query_len > 1:
                calls[IMPLS[2]] = _vllm(x, True)
            if path == "native":
                flash = _flash(x)
                if flash is not None:
                    calls[IMPLS[3]] = flash
            outputs = {name: fn().clone() for name, fn in calls.items()}
            truth = (reference.paged_attention(x.q, x.key_cache, x.value_cache, x.block_table, x.seq_lens, x.cu,
                                               HEAD_DIM ** -0.5) if context == min(c for _, _, c in cases(quick))
                     else outputs[IMPLS[0]])
            for name, fn in calls.items():
                result["err"].setdefault(key, {})[name] = (rel_err(outputs[name], truth)
                                                           if torch.isfinite(outputs[name]).all() else float("nan"))
                result["ms"].setdefault(key, {})[name] = gpu_time_us(fn, CALLS_PER_GRAPH, replays=5,
                                                                     stream=stream) / 1000.0
            print(f"  [{path}] {key}: " + ", ".join(f"{n} {t:.3f} ms" for n, t in result["ms"][key].items()),
                  file=sys.stderr, flush=True)
            del x, calls, outputs
            save()
        if sweep:
            for context in (65536, 4096):
                x = make_inputs(1, 4, context, gen)
                base = plan.plan_launch(1, HEADS_KV, HEADS_Q // HEADS_KV, 4, plan_sms, tensor_cores)
                if context == 4096:  # the shortest segment decides how many programs a short context gets
                    variants = [(base, m) for m in (128, 256, 512, 1024)]
                else:
                    variants = [(dataclasses.replace(base, tile=t, num_warps=w, splits=s), plan.MIN_TOKENS_PER_SPLIT)
                                for t in (16, 32, 64) for w in (4, 8) for s in (32, 64, 128)
                                if not (t == 64 and path != "native")]
                    if path == "native":  # Turing compiles one stage; elsewhere cp.async can pipeline the loads
                        variants.append((dataclasses.replace(base, num_stages=2), plan.MIN_TOKENS_PER_SPLIT))
                for launch, min_tokens in variants:
                    name = (f"{context // 1024}k tile={launch.tile} warps={launch.num_warps} "
                            f"splits={launch.splits} stages={launch.num_stages} min_tokens={min_tokens}")
                    try:
                        fn = _ours(x, launch, min_tokens)
                        fn()
                        result["sweep"][name] = gpu_time_us(fn, CALLS_PER_GRAPH, replays=5, stream=stream) / 1000
                    except Exception as exc:  # a variant that does not compile (shared memory) is reported
                        result["sweep"][name] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    print(f"  [{path}] sweep {name}: {result['sweep'][name]}", file=sys.stderr, flush=True)
                    save()
                del x
    save()


def report(runs: dict[str, dict]) -> str:
    import torch
    import triton

    try:
        import vllm

        vllm_version = vllm.__version__
    except ImportError:
        vllm_version = "not importable"
    lines = [f"## Split-KV verify attention by context ({datetime.date.today().isoformat()})", "",
             f"{torch.cuda.get_device_name(0)}, vLLM {vllm_version}, torch {torch.__version__}, Triton "
             f"{triton.__version__}. One TP2 rank of Qwen3.6-27B (12 query heads, 2 KV heads, head_dim 256, fp16, "
             f"{BLOCK}-token blocks). GPU ms per call (median of CUDA-graph replays); speed-up = vLLM's launch over "
             "Caovan's. err: relative L2 difference to the float64 reference at the shortest context, to Caovan's "
             "output at the others.", ""]
    lines += [f"- {path}: {run['described']} (split planned for {run['sms']} SMs)" for path, run in runs.items()]
    for path, run in runs.items():
        lines += ["", f"### {path}", "",
                  "| batch | query tokens | context | segments | " + " | ".join(f"{n} ms" for n in IMPLS)
                  + " | speed-up over vLLM | err (Caovan / vLLM / 3D / FA) |", "|---" * (6 + len(IMPLS)) + "|"]
        for key, times in run["ms"].items():
            batch, query_len, context = key.split()
            ours, theirs = times.get(IMPLS[0]), times.get(IMPLS[1])
            cells = " | ".join("-" if times.get(n) is None else f"{times[n]:.3f}" for n in IMPLS)
            errs = " / ".join("-" if run["err"][key].get(n) is None else f"{run['err'][key][n]:.1e}" for n in IMPLS)
            lines.append(f"| {batch[1:]} | {query_len[1:]} | {context} | {run['launch'][key]['splits']} | {cells} | "
                         f"{theirs / ours:.2f}x | {errs} |")
        if run["sweep"]:
            lines += ["", f"Launch variants on the {path} path (1 sequence, 4 query tokens):", "",
                      "| variant | ms |", "|---|---|"]
            lines += [f"| {name} | {value if isinstance(value, str) else f'{value:.4f}'} |"
                      for name, value in run["sweep"].items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="contexts 4k, 32k and 64k only")
    parser.add_argument("--sweep", action="store_true", help="also time launch variants of the split kernel")
    parser.add_argument("--paths", default="native,mma", help="code paths to run now (comma-separated)")
    parser.add_argument("--work-dir", type=Path, help="keep each path's result here (default: a fresh folder)")
    parser.add_argument("--sms", type=int, help="hold every path to this many SMs and plan the split for them")
    opts = parser.parse_args()
    if opts.path:
        _child(opts.path, opts.quick, opts.sweep, opts.sms, opts.out)
        return 0
    from lab import turing_paths

    work = opts.work_dir or Path(tempfile.mkdtemp(prefix="split-kv-bench-"))
    extra = (["--quick"] if opts.quick else []) + (["--sweep"] if opts.sweep else []) + (
        ["--sms", str(opts.sms)] if opts.sms else [])
    try:
        runs = turing_paths.run_paths(Path(__file__), opts.paths, extra, work, 1800)
    except ValueError as exc:
        parser.error(str(exc))
    text = report(runs)
    print(text)
    if opts.out:
        opts.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
