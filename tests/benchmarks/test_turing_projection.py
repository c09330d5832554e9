"""The 2080 Ti projection's arithmetic: the bytes of a decode step and the flops of a prefill follow from the shapes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("turing_projection", ROOT / "benchmarks" / "turing_projection.py")
projection = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = projection  # its dataclass looks its module up there
_spec.loader.exec_module(projection)


def test_a_decode_step_reads_the_lm_head_once_per_pass_and_the_awq_weights_once():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    step = projection.decode_step(m, hw, tp=2, spec=3, context=4096)
    head = 124_160 * 5120 * 2  # vocab/2 x hidden, fp16: read by the target, then once per draft
    assert (step["lm_head, target (GB)"], step["lm_head, drafter x S (GB)"]) == (head / 1e9, head * 3 / 1e9)
    # the target's AWQ linears: 64 of the 65 decoder layers' (the 65th is the MTP layer, read once per draft)
    assert 6.3 < step["target linears (AWQ) (GB)"] < 6.5
    assert abs(step["drafter layer x S (GB)"] * 64 / 3 - step["target linears (AWQ) (GB)"]) < 1e-9
    parts = sum(v for k, v in step.items() if k.endswith("(GB)") and k != "bytes (GB)")
    assert abs(step["bytes (GB)"] - parts) < 1e-9


def test_draft_vocab_cuts_only_the_drafters_lm_head_reads_on_the_rank_holding_the_low_ids():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    whole = projection.decode_step(m, hw, tp=2, spec=3, context=4096)
    rows = projection.busiest_rank_rows(m.vocab_size, 2, 32768)
    hot = projection.decode_step(m, hw, tp=2, spec=3, context=4096, hot_rows=rows)
    assert rows == 32768 and projection.busiest_rank_rows(m.vocab_size, 2, 200_000) == 124_160
    assert hot["lm_head, drafter x S (GB)"] == 3 * 32768 * 5120 * 2 / 1e9
    assert {k: v for k, v in hot.items() if "drafter x S" not in k and "bytes" not in k and "time" not in k} == {
        k: v for k, v in whole.items() if "drafter x S" not in k and "bytes" not in k and "time" not in k}


def test_prefill_grows_faster_than_linearly_and_tensor_cores_only_shorten_attention():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    fma = [projection.prefill(m, hw, 2, n, hw.fma_fp32 * hw.attention_fma_efficiency) for n in (4096, 32768)]
    mma = [projection.prefill(m, hw, 2, n, hw.mma_fp16 * hw.attention_mma_efficiency) for n in (4096, 32768)]
    assert fma[1]["attention (s)"] == 64 * fma[0]["attention (s)"]  # causal attention: quadratic in the prompt
    assert fma[1]["GEMMs (s)"] == 8 * fma[0]["GEMMs (s)"]
    for f, t in zip(fma, mma):
        assert t["attention (s)"] < f["attention (s)"]
        assert (t["GEMMs (s)"], t["GDN (s)"], t["all-reduces (s)"]) == (f["GEMMs (s)"], f["GDN (s)"],
                                                                        f["all-reduces (s)"])


def test_the_split_verify_reads_the_kv_once_and_stock_once_per_query_block_at_a_few_programs_rate():
    m, hw = projection._model(projection.REAL_CONFIG), projection.Turing()
    # one rank: 2 KV heads x 256 x (K, V) x fp16 = 2 KiB per token and layer; 16 attention layers, 3 drafter passes
    per_layer = 2 * 2 * 256 * 2 * 65536
    split = projection.verify_attention(m, hw, 2, 3, 65536, split_kv=True)
    stock = projection.verify_attention(m, hw, 2, 3, 65536, split_kv=False)
    assert split["KV read (GB)"] == per_layer * (16 + 3) / 1e9
    # 6 query heads per KV head: vLLM's blocks of 16 rows hold 2 query tokens, so 4 tokens are 2 blocks: 2 reads, 4
    # programs streaming at their own rate; the drafter's one-token passes are split by vLLM too
    assert stock["KV read (GB)"] == per_layer * (16 * 2 + 3) / 1e9
    stream = hw.bandwidth * hw.bandwidth_efficiency
    assert abs(stock["attention (ms)"] - (per_layer * 32 / (4 * hw.attention_program_bandwidth)
                                          + per_layer * 3 / stream) * 1e3) < 1e-9
    assert abs(split["attention (ms)"] - per_layer * 19 / stream * 1e3) < 1e-9
    short = projection.verify_attention(m, hw, 2, 3, 4096, split_kv=False)["attention (ms)"]
    assert abs(stock["attention (ms)"] / short - 16) < 1e-9  # linear in the context, both ways
