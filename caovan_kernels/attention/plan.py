"""When the split-KV verify kernel takes a batch, and how it is launched: plain Python, no torch or Triton.

vLLM's Triton attention splits the KV walk across programs only when every sequence has one query token; a batch
of MTP verifies (1 + k query tokens per sequence) gets one program per (query block, KV head), so a single
sequence on one rank of Qwen3.6-27B (2 KV heads) walks its whole context with a handful of programs while the rest
of the GPU waits. Here the walk is cut into `splits` segments per (sequence, KV head), enough programs to fill the
GPU about twice, and a second kernel merges the segments.

Everything that shapes a launch is fixed per batch size and query length, never by context length, because vLLM
replays a decode step from a CUDA graph captured at one context: the segment length is worked out on the GPU from
each sequence's length.
"""

from __future__ import annotations

from dataclasses import dataclass

# Pure decode (one query token per sequence) keeps vLLM's own launch, which already splits the KV walk.
MIN_QUERY_LEN = 2
# Query rows a program holds (query tokens x query heads sharing one KV head): its fp32 accumulator is rows x
# head_dim, which must stay in registers on a Turing SM. With tensor-core dots 64 rows at head_dim 256 fit (8 warps,
# a 16-token tile); Triton's FMA dots spill there and hold 32 (lab/sm75_fit.py measures both).
MAX_ROWS_TENSOR_CORES = 64
MAX_ROWS_FMA = 32
# Segments per (sequence, KV head): each writes rows x head_dim floats that the merge reads back.
MAX_SPLITS = 64
# The shortest segment worth its own program: below this, writing and merging its partial result costs more than
# the KV it reads (256 tokens of one fp16 KV head at head_dim 256 are 256 KB; its partial result is 32 KB).
MIN_TOKENS_PER_SPLIT = 256
# Programs per SM the split aims for: two, so that one program's memory stalls are hidden behind another's.
PROGRAMS_PER_SM = 2
MAX_HEAD_DIM = 256


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class SplitLaunch:
    """One launch shape: query rows per program, segments per (sequence, KV head), KV tokens per inner step, warps,
    and software pipelining stages (1 on Turing, where TensorCore75 compiles one stage and Triton's FMA path has no
    asynchronous copies)."""

    rows: int
    splits: int
    tile: int
    num_warps: int
    num_stages: int = 1

    def programs(self, batch: int, kv_heads: int) -> int:
        return batch * kv_heads * self.splits


def rows_for(max_query_len: int, group: int) -> int:
    """Query rows a program holds for this many query tokens of `group` query heads per KV head (a dot needs 16)."""
    return max(16, next_pow2(max_query_len * group))


def max_rows(tensor_cores: bool) -> int:
    return MAX_ROWS_TENSOR_CORES if tensor_cores else MAX_ROWS_FMA


def plan_launch(batch: int, kv_heads: int, group: int, max_query_len: int, sms: int,
                tensor_cores: bool = True) -> SplitLaunch | None:
    """The split launch for a batch, or None where vLLM's own launch should run it: pure decode, more query rows
    than a program holds, or a batch whose (sequence, KV head) pairs alone fill the GPU. tensor_cores: the dots run
    on tensor cores (any GPU from sm_80; sm_75 with TensorCore75), else on Triton's FMA lowering (sm_75)."""
    if max_query_len < MIN_QUERY_LEN or max_query_len * group > max_rows(tensor_cores):
        return None
    pairs = batch * kv_heads
    splits = min(MAX_SPLITS, -(-PROGRAMS_PER_SM * sms // pairs))
    if splits < 2:
        return None
    rows = rows_for(max_query_len, group)
    # Within a Turing SM's 64 KB of shared memory and 255 registers a thread, without spills (lab/sm75_fit.py): the
    # query rows and a K and a V tile of fp16 at head_dim 256.
    if not tensor_cores:
        return SplitLaunch(rows=rows, splits=splits, tile=16, num_warps=8)
    return SplitLaunch(rows=rows, splits=splits, tile=32 if rows <= 32 else 16, num_warps=4 if rows <= 32 else 8)


def max_programs(kv_heads: int, group: int, max_query_len: int, sms: int, max_batch: int,
                 tensor_cores: bool = True) -> int:
    """The most (sequence, KV head, segment) programs any batch up to max_batch launches: the workspace's size."""
    launches = (plan_launch(b, kv_heads, group, max_query_len, sms, tensor_cores) for b in range(1, max_batch + 1))
    return max((launch.programs(b, kv_heads) for b, launch in enumerate(launches, start=1) if launch), default=0)
