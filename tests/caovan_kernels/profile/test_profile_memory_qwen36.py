"""The memory arithmetic for Qwen3.6-27B-AWQ-INT4 on 2x RTX 2080 Ti 22G, pinned against numbers worked out by hand.

Model (DESIGN.md "Qwen3.6-27B shapes", fixture config.json): hidden h=5120; 64 layers = 16 x (3 GDN + 1 full
attention); GDN 16 key heads, 48 value heads, head dims 128, conv kernel 4 -> conv_dim = 2*16*128 + 48*128 = 10240;
attention 24 q heads (with output gate: q_proj gives 2*24*256 = 12288), 4 KV heads, head_dim 256; FFN 17408;
vocab 248320 (embedding and LM head untied); 1 MTP layer; SSM state fp32. AWQ 4 bit, group 128, fp16 scales and packed
4-bit zeros; in_proj_a / in_proj_b left in fp16 (modules_to_not_convert).

Per GPU at TP2:
- AWQ bytes per weight: 4/8 + 2/128 (scale) + 0.5/128 (zero) = 0.51953125.
  Quantized params per attention layer: 5120*(12288+1024+1024) + 6144*5120 = 104,857,600;
  per GDN layer: 5120*(10240 + 6144) + 6144*5120 = 115,343,360; FFN per layer: 3*5120*17408 = 267,386,880.
  Main model: 16*(104,857,600+267,386,880) + 48*(115,343,360+267,386,880) = 24,326,963,200;
  MTP: fc 10240*5120 = 52,428,800 + attention 104,857,600 + FFN 267,386,880 = 424,673,280.
  Total 24,751,636,480 params * 0.51953125 = 12,859,248,640 B; / 2 GPUs = 6,429,624,320 B.
- fp16: embedding + LM head 2 * 248320*5120*2 / 2 = 2,542,796,800; in_proj_a+b 48 * 5120*96*2 / 2 = 23,592,960;
  conv1d 48 * 10240*4*2 / 2 = 1,966,080.  Weights per GPU = 6,429,624,320 + 2,568,355,840 = 8,997,980,160 B (8.38 GiB).
- KV per token per GPU: (16 attention + 1 MTP layer) * 2 (K,V) * 2 KV heads * 256 * 2 B = 17 * 2048 = 34,816 B.
- GDN state, one slot of one layer: recurrent 24 heads * 128 * 128 * 4 B = 1,572,864; conv 5120 * (3 + S) * 2 B.
  S=3: 61,440 -> 1,634,304 B. Attention block = 16 * ceil(1,634,304 / (16*2048)) = 16*50 = 800 tokens, page padded to
  800*2048 = 1,638,400 B; per sequence 48 layers * (1+3) slots * 1,638,400 = 314,572,800 B (300 MiB).
  S=4: conv 71,680 -> 1,644,544 B; block 16*51 = 816; page 1,671,168; per sequence 48*5*1,671,168 = 401,080,320 B.
- 22 GiB card = 23,622,320,128 B, assumed idle. Kept outside vLLM: 768 MiB CUDA graphs + 512 MiB safety
  = 1,342,177,280 -> utilization floor((23,622,320,128 - 1,342,177,280) * 100 / 23,622,320,128)% = 94%;
  budget 23,622,320,128 * 94 // 100 = 22,204,980,920 B.
- Activations: 2048 tokens * 2 B * (4*5120 + 3*8704 + 2*5120) = 2048 * 113,664 = 232,783,872, + 512 MiB fixed
  = 769,654,784 B.
- Pool = 22,204,980,920 - 8,997,980,160 - 769,654,784 = 12,437,345,976 B (11.58 GiB).
- max-num-seqs 1: MTP=4 for the full 262,144 tokens needs ceil(262144/816) = 322 blocks * 816 * 34,816
  = 9,147,973,632 + 401,080,320 = 9,549,053,952 B <= 90% of the pool (11,193,611,378) -> MTP=4. Memory would allow
  (12,437,345,976 - 401,080,320) // (816*34,816 = 28,409,856) = 423 blocks = 345,168 tokens; capped at the model's
  262,144.
- max-num-seqs 4: MTP=4 would need 4 * 9,549,053,952 > pool -> MTP=3. Per sequence 12,437,345,976 // 4
  = 3,109,336,494 - 314,572,800 = 2,794,763,694 // (800*34,816 = 27,852,800) = 100 blocks -> 80,000 tokens.
"""

from __future__ import annotations

import json

from profile_cases import TWO_2080TI

from caovan_kernels.profile import build_profile, load_model_facts, memory


def test_weights_kv_and_gdn_state_per_gpu_at_tp2(qwen36_dir):
    m = load_model_facts(qwen36_dir)
    assert (m.num_gdn_layers, m.num_attention_layers, m.mtp_layers) == (48, 16, 1)
    weights = memory.weight_bytes_per_gpu(m, tp=2)
    assert weights.quantized_linear == 6_429_624_320
    assert weights.embeddings == 2_542_796_800
    assert weights.unquantized_linear == 23_592_960
    assert weights.other == 1_966_080
    assert weights.total == 8_997_980_160

    assert memory.kv_bytes_per_token(m, tp=2, kv_dtype_bytes=2, spec_tokens=3) == 34_816
    assert memory.kv_bytes_per_token(m, tp=2, kv_dtype_bytes=2, spec_tokens=0) == 32_768  # no draft layer
    assert memory.gdn_state_page_bytes(m, tp=2, spec_tokens=3, ssm_dtype_bytes=4) == 1_634_304
    s3 = memory.cache_layout(m, tp=2, spec_tokens=3, kv_dtype_bytes=2, ssm_dtype_bytes=4)
    assert (s3.block_tokens, s3.gdn_state_bytes_per_seq) == (800, 314_572_800)
    s4 = memory.cache_layout(m, tp=2, spec_tokens=4, kv_dtype_bytes=2, ssm_dtype_bytes=4)
    assert (s4.block_tokens, s4.gdn_state_bytes_per_seq) == (816, 401_080_320)


def _speculative_tokens(profile) -> int:
    return json.loads(profile.args[profile.args.index("--speculative-config") + 1])["num_speculative_tokens"]


def test_one_sequence_gets_mtp4_and_the_full_context(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-num-seqs", "1"], TWO_2080TI, installed_vllm)
    assert p.memory["budget_bytes"] == 22_204_980_920
    assert p.memory["weights_bytes"] == 8_997_980_160
    assert p.memory["activation_bytes"] == 769_654_784
    assert p.memory["pool_bytes"] == 12_437_345_976
    assert p.memory["max_model_len_fit"] == 345_168
    assert _speculative_tokens(p) == 4
    assert p.args[p.args.index("--max-model-len") + 1] == "262144"
    assert p.args[p.args.index("--gpu-memory-utilization") + 1] == "0.94"
    assert "the model's maximum" in p.decision("Elastic-KV").reason


def test_four_sequences_get_mtp3_and_80000_tokens(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert p.memory["gdn_state_bytes_per_seq"] == 314_572_800
    assert p.memory["kv_bytes_per_token"] == 34_816
    assert _speculative_tokens(p) == 3
    assert p.args[p.args.index("--max-model-len") + 1] == "80000"
    # 80,000 tokens really fit for 4 sequences and one more block would not.
    layout = memory.cache_layout(load_model_facts(qwen36_dir), 2, 3, 2, 4)
    assert layout.bytes_for(4, 80_000) <= p.memory["pool_bytes"] < layout.bytes_for(4, 80_800)


def test_sm75_decisions_half_tp2_no_custom_all_reduce_fp16_kv(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, [], TWO_2080TI, installed_vllm)
    args = p.args
    assert args[args.index("--dtype") + 1] == "half"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert "--disable-custom-all-reduce" in args
    assert "--kv-cache-dtype" not in args
    kv = p.decision("Elastic-KV dtype")
    assert kv.value == "auto (float16)"
    # The installed vLLM's Triton attention backend really carries the SM89 refusal; the reason says so plainly.
    assert installed_vllm.fp8_kv_min_sm == 89
    assert "refuses an fp8 KV cache" in kv.reason and "SM89" in kv.reason
