"""A projection, not a measurement: Qwen3.6-27B-AWQ on 2x RTX 2080 Ti 22G (TP2, MTP=3), from the model's shapes and
stated hardware rates. No 2080 Ti is reachable here; every figure this prints follows from the assumptions it prints
with it, and a measured ratio (the Turing proxy, docs/benchmarks.md) outranks it wherever both exist.

    python benchmarks/turing_projection.py [--config CFG] [--context 4096] [--prompts 4096,16384,32768]
                                           [--draft-vocab 8192,16384,32768,65536] [--contexts 4096,32768,65536,131072]

Decode is counted in bytes (a 2080 Ti decodes at the speed of its memory), prefill in flops, and both pay the
all-reduces tensor parallelism needs after each attention/GDN block and each MLP, over PCIe without NVLink.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from caovan_kernels.profile import load_model_facts, memory

REAL_CONFIG = Path(__file__).resolve().parent / "models" / "qwen3_6_27b_awq.json"


@dataclass(frozen=True)
class Turing:
    """The assumptions. Rates: DESIGN.md's 2080 Ti facts; efficiencies and PCIe: assumed, stated here."""

    bandwidth: float = 616e9  # B/s, GDDR6
    bandwidth_efficiency: float = 0.75  # assumed: what weight-streaming GEMV/Marlin kernels reach
    mma_fp16: float = 53.8e12  # flop/s, tensor cores, fp16 in, fp32 accumulate (GeForce rate)
    fma_fp32: float = 13.4e12  # flop/s, CUDA cores
    gemm_efficiency: float = 0.6  # assumed: Marlin's AWQ GEMMs in prefill
    attention_mma_efficiency: float = 0.35  # assumed: Triton attention on m16n8k8 (TensorCore75)
    attention_fma_efficiency: float = 0.5  # assumed: Triton attention with FMA dots (stock Triton 3.4+)
    gdn_fma_efficiency: float = 0.3  # assumed: chunked GDN prefill, fp32 dots on CUDA cores either way
    allreduce_latency_s: float = 30e-6  # assumed: one NCCL all-reduce of a small message, 2 GPUs over PCIe
    allreduce_bandwidth: float = 6e9  # assumed B/s: PCIe 3.0 x16 without P2P (through host memory)
    # B/s one program of vLLM's Triton attention streams KV at, walking a context alone: measured on the Turing proxy
    # (an H100, 2026-12-06: the MTP=3 verify step grew 1.1 ms per 1,000 tokens, 16 layers x 4 programs each reading
    # their KV head's 1 MB per 1,000 tokens); assumed to hold on a 2080 Ti SM (the ratio of the two GPUs' SMs is
    # not measured)
    attention_program_bandwidth: float = 14.5e9


def _model(config: Path):
    folder = Path(tempfile.mkdtemp())
    shutil.copy(config, folder / "config.json")
    try:
        return load_model_facts(folder)
    finally:
        shutil.rmtree(folder)


def _allreduce_s(hw: Turing, tokens: int, hidden: int) -> float:
    return hw.allreduce_latency_s + tokens * hidden * 2 / hw.allreduce_bandwidth


def busiest_rank_rows(vocab: int, tp: int, hot: int) -> int:
    """lm_head rows the busiest rank reads per drafter pass with DraftVocab over the tokenizer's first `hot` ids: the
    vocabulary is split into contiguous shards, so the low ids all sit on the first rank."""
    return min(hot, -(-vocab // tp))


def decode_step(m, hw: Turing, tp: int, spec: int, context: int, hot_rows: int | None = None) -> dict[str, float]:
    """Bytes one rank reads in one MTP decode step (the target over 1+S tokens, S drafter passes) and its time;
    `hot_rows`: the drafter's lm_head rows per pass on this rank with DraftVocab (None: its whole shard)."""
    weights = memory.weight_bytes_per_gpu(m, tp, vision=False)
    mtp_share = 1 / (len(m.layer_types) + 1)  # the MTP decoder layer's part of the linears, one layer in 65
    linears = weights.quantized_linear + weights.unquantized_linear
    lm_head = m.vocab_size // tp * m.hidden_size * memory.ENGINE_DTYPE_BYTES
    kv_layer_token = memory.kv_bytes_per_token_per_layer(m, tp, 2)
    gdn_state = memory.gdn_state_page_bytes(m, tp, spec, 4)
    parts = {
        "target linears (AWQ)": linears * (1 - mtp_share),
        "drafter layer x S": linears * mtp_share * spec,
        "lm_head, target": lm_head,
        "lm_head, drafter x S": (lm_head if hot_rows is None else hot_rows * m.hidden_size
                                 * memory.ENGINE_DTYPE_BYTES) * spec,
        "KV cache": kv_layer_token * context * (m.num_attention_layers + spec),
        "GDN state (read 1, write 1+S)": gdn_state * m.num_gdn_layers * (2 + spec),
    }
    total = sum(parts.values())
    allreduces = 2 * len(m.layer_types) * _allreduce_s(hw, 1 + spec, m.hidden_size) \
        + 2 * spec * _allreduce_s(hw, 1, m.hidden_size)
    return {**{f"{k} (GB)": v / 1e9 for k, v in parts.items()}, "bytes (GB)": total / 1e9,
            "memory time (ms)": total / (hw.bandwidth * hw.bandwidth_efficiency) * 1e3,
            "all-reduces (ms)": allreduces * 1e3}


def verify_attention(m, hw: Turing, tp: int, spec: int, context: int, split_kv: bool) -> dict[str, float]:
    """KV bytes one rank reads for one MTP step's attention at `context` tokens, and its time. The target's verify
    (1 + S query tokens): vLLM's Triton attention launches one program per (block of 16 // group query tokens, KV
    head), each reading its KV head's whole context, so the KV is read once per query block by a handful of programs;
    the split-KV kernel reads it once, walked by enough programs to stream at the memory's rate. The drafter's passes
    (one query token) take vLLM's split launch either way."""
    per_layer = memory.kv_bytes_per_token_per_layer(m, tp, 2) * context
    kv_heads = max(1, m.num_key_value_heads // tp)
    group = m.num_attention_heads // m.num_key_value_heads
    stream = hw.bandwidth * hw.bandwidth_efficiency
    drafter = per_layer * spec
    if split_kv:
        target = per_layer * m.num_attention_layers
        seconds = (target + drafter) / stream
    else:
        query_blocks = -(-(1 + spec) // max(1, 16 // group))
        target = per_layer * m.num_attention_layers * query_blocks
        seconds = target / min(stream, query_blocks * kv_heads * hw.attention_program_bandwidth) + drafter / stream
    return {"KV read (GB)": (target + drafter) / 1e9, "attention (ms)": seconds * 1e3}


def prefill(m, hw: Turing, tp: int, tokens: int, attention_rate: float, chunk: int = 2048) -> dict[str, float]:
    """Seconds for one rank to prefill `tokens`: AWQ GEMMs, causal attention, chunked GDN, all-reduces per chunk."""
    weights = memory.weight_bytes_per_gpu(m, tp, vision=False)
    params = (weights.quantized_linear / 0.51953125 if m.quantization else 0) + weights.unquantized_linear / 2
    gemm = 2 * params * tokens / (hw.mma_fp16 * hw.gemm_efficiency)
    heads = m.num_attention_heads // tp
    attention = m.num_attention_layers * 2 * 2 * heads * m.head_dim * tokens * tokens / 2 / attention_rate
    hv, k, v, c = m.gdn_value_heads // tp, m.gdn_key_head_dim, m.gdn_value_head_dim, 64
    gdn_flops = m.num_gdn_layers * tokens * hv * 2 * (c * (k + v) + 4 * k * v)  # intra-chunk + state, per token
    gdn = gdn_flops / (hw.fma_fp32 * hw.gdn_fma_efficiency)
    chunks = -(-tokens // chunk)
    allreduce = chunks * 2 * len(m.layer_types) * _allreduce_s(hw, min(chunk, tokens), m.hidden_size)
    return {"GEMMs (s)": gemm, "attention (s)": attention, "GDN (s)": gdn, "all-reduces (s)": allreduce,
            "TTFT (s)": gemm + attention + gdn + allreduce}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REAL_CONFIG)
    parser.add_argument("--context", type=int, default=4096, help="tokens in context during decode")
    parser.add_argument("--prompts", default="4096,16384,32768")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--mtp", type=int, default=3)
    parser.add_argument("--draft-vocab", default="8192,16384,32768,65536",
                        help="DraftVocab sizes (tokenizer order) for the decode table")
    parser.add_argument("--contexts", default="4096,32768,65536,131072", help="contexts for the decode-by-context table")
    a = parser.parse_args()
    m, hw = _model(a.config), Turing()
    print("PROJECTION for 2x RTX 2080 Ti 22G (not measured). Assumptions:")
    print(json.dumps(hw.__dict__, indent=1))
    step = decode_step(m, hw, a.tp, a.mtp, a.context)
    step_ms = step["memory time (ms)"] + step["all-reduces (ms)"]
    print(f"\nDecode step, MTP={a.mtp}, {a.context} tokens of context, per rank:")
    for key, value in step.items():
        print(f"  {key}: {value:.3f}")
    print(f"  step: {step_ms:.1f} ms; tokens/s at a mean of 2.0 / 2.5 / 3.0 tokens per step (acceptance is not "
          f"measurable without real weights): " + " / ".join(f"{t * 1000 / step_ms:.0f}" for t in (2.0, 2.5, 3.0)))
    print(f"\nDraftVocab, MTP={a.mtp}: the drafter's lm_head over the tokenizer's first K ids, on the busiest rank "
          f"(rank 0 holds ids 0..{-(-m.vocab_size // a.tp) - 1}); answers unchanged, acceptance assumed unchanged:")
    print("| K | drafter lm_head rows per pass | step GB | step ms | tokens/s at 2.5 per step | vs whole vocabulary |")
    print("|---:|---:|---:|---:|---:|---:|")
    for hot in [None, *(int(x) for x in a.draft_vocab.split(","))]:
        rows = None if hot is None else busiest_rank_rows(m.vocab_size, a.tp, hot)
        cut = decode_step(m, hw, a.tp, a.mtp, a.context, rows)
        ms = cut["memory time (ms)"] + cut["all-reduces (ms)"]
        print(f"| {'all' if hot is None else hot} | {m.vocab_size // a.tp if rows is None else rows} | "
              f"{cut['bytes (GB)']:.2f} | {ms:.1f} | {2.5 * 1000 / ms:.0f} | {step_ms / ms:.2f}x |")
    print(f"\nDecode step by context, MTP={a.mtp}, per rank: the step above without its KV reads, plus the verify's "
          "attention through vLLM's Triton attention (stock) or the split-KV kernel (Caovan):")
    print("| context | KV read, stock (GB) | attention, stock (ms) | step, stock (ms) | tokens/s at 2.5 | KV read, "
          "split (GB) | attention, split (ms) | step, split (ms) | tokens/s at 2.5 | split over stock |")
    print("|---:" * 10 + "|")
    for context in (int(x) for x in a.contexts.split(",")):
        base = decode_step(m, hw, a.tp, a.mtp, context)
        rest_ms = (base["memory time (ms)"] * (1 - base["KV cache (GB)"] / base["bytes (GB)"])
                   + base["all-reduces (ms)"])
        stock, split = (verify_attention(m, hw, a.tp, a.mtp, context, split_kv) for split_kv in (False, True))
        stock_ms, split_ms = rest_ms + stock["attention (ms)"], rest_ms + split["attention (ms)"]
        print(f"| {context} | {stock['KV read (GB)']:.2f} | {stock['attention (ms)']:.1f} | {stock_ms:.1f} | "
              f"{2500 / stock_ms:.0f} | {split['KV read (GB)']:.2f} | {split['attention (ms)']:.1f} | {split_ms:.1f} | "
              f"{2500 / split_ms:.0f} | {stock_ms / split_ms:.2f}x |")
    print("\nTime to first token (one request), stock Triton (FMA attention) vs TensorCore75 (mma attention):")
    print("| prompt | GEMMs (s) | GDN (s) | all-reduces (s) | attention FMA (s) | TTFT FMA (s) | attention mma (s) "
          "| TTFT mma (s) | ratio |")
    print("| --- " * 9 + "|")
    for tokens in (int(x) for x in a.prompts.split(",")):
        fma = prefill(m, hw, a.tp, tokens, hw.fma_fp32 * hw.attention_fma_efficiency)
        mma = prefill(m, hw, a.tp, tokens, hw.mma_fp16 * hw.attention_mma_efficiency)
        print(f"| {tokens} | {fma['GEMMs (s)']:.2f} | {fma['GDN (s)']:.2f} | {fma['all-reduces (s)']:.2f} | "
              f"{fma['attention (s)']:.2f} | {fma['TTFT (s)']:.2f} | {mma['attention (s)']:.2f} | "
              f"{mma['TTFT (s)']:.2f} | {fma['TTFT (s)'] / mma['TTFT (s)']:.1f}x |")


if __name__ == "__main__":
    main()
