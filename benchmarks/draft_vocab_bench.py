"""The drafter's logits, whole shard against DraftVocab's hot rows, at one TP2 rank of Qwen3.6-27B (124,160 rows x
5,120, fp16): what one drafter pass costs and reads, side by side in one run.

"whole" is vLLM's unquantized lm_head (F.linear over the shard's rows); "hot K" is
caovan_kernels.draft_vocab.hot_head.HotRows over the tokenizer's first K ids (the busiest rank's rows: the low ids
all sit on rank 0), minus-infinity fill and scatter included. Each case: warm-up, then the median of --repeat timed
calls (CUDA events on a GPU, perf_counter on a CPU). Inputs are random (seed printed; --seed replays).

    python benchmarks/draft_vocab_bench.py [--hot 8192,16384,32768,65536] [--batch 1,4] [--rows 124160]
                                          [--hidden 5120] [--repeat 50] [--seed N] [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from caovan_kernels.draft_vocab.hot_head import HotRows


def timed(fn, device: torch.device, repeat: int) -> float:
    """Median milliseconds of `fn()`."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hot", default="8192,16384,32768,65536")
    parser.add_argument("--batch", default="1,4")
    parser.add_argument("--rows", type=int, default=124160, help="the rank's vocabulary shard")
    parser.add_argument("--hidden", type=int, default=5120)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = parser.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    device = torch.device(a.device)
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(a.rows, a.hidden, generator=generator).to(device, dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, {dtype}, shard {a.rows} x {a.hidden}, seed {seed} (--seed replays)")
    print("| batch | lm_head rows read | ms per drafter pass | GB read | GB/s | vs whole |")
    print("|---:|---|---:|---:|---:|---:|")
    for batch in (int(x) for x in a.batch.split(",")):
        hidden = torch.randn(batch, a.hidden, generator=generator).to(device, dtype)
        whole = timed(lambda: F.linear(hidden, weight), device, a.repeat)
        row_bytes = a.hidden * weight.element_size()
        print(f"| {batch} | whole shard ({a.rows}) | {whole:.3f} | {a.rows * row_bytes / 1e9:.3f} | "
              f"{a.rows * row_bytes / whole / 1e6:.0f} | 1.00x |")
        for hot in (int(x) for x in a.hot.split(",")):
            rows = HotRows(weight, range(min(hot, a.rows)), 0, a.rows)
            ms = timed(lambda: rows.logits(hidden), device, a.repeat)
            print(f"| {batch} | hot {hot} | {ms:.3f} | {rows.bytes / 1e9:.3f} | {rows.bytes / ms / 1e6:.0f} | "
                  f"{whole / ms:.2f}x |")


if __name__ == "__main__":
    main()
