"""benchmarks/scale_bench.py's parts that run without a GPU: the rank's config, the tokenizer it extends for vLLM's
multimodal processor, and the kernel categories of a profiler trace."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "benchmarks" / "scale_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_a_tp2_rank_halves_what_tensor_parallelism_splits_and_keeps_the_rest():
    real = json.loads(bench.REAL_CONFIG.read_text())
    rank = bench.rank_config(real, 2)
    text, full = rank["text_config"], real["text_config"]
    assert (text["num_attention_heads"], text["num_key_value_heads"]) == (12, 2)
    assert (text["linear_num_key_heads"], text["linear_num_value_heads"]) == (8, 24)
    assert (text["intermediate_size"], text["vocab_size"]) == (8704, 124_160)
    for kept in ("hidden_size", "num_hidden_layers", "head_dim", "linear_key_head_dim", "layer_types"):
        assert text[kept] == full[kept]
    assert (rank["vision_config"]["num_heads"], rank["vision_config"]["intermediate_size"]) == (8, 2152)
    assert real["text_config"]["num_attention_heads"] == 24  # the real config is left as it was
    with pytest.raises(SystemExit, match="does not split over 5 ranks"):
        bench.rank_config(real, 5)


def _small_qwen3_5(tmp: Path) -> Path:
    """A Qwen3.5-like tokenizer folder as the demo's: a byte-level BPE of 1020 tokens plus added special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ((0, "<|endoftext|>"), (1, "<|im_start|>"), (2, "<|im_end|>"))
    vocab = {chr(ord("a") + i % 26) * (1 + i // 26): i for i in range(3, 1020)} | {c: i for i, c in specials}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokenizer.decoder = decoders.ByteLevel()
    data = json.loads(tokenizer.to_str())
    data["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True}
                            for i, c in (*specials, (1020, "<|vision_start|>"), (1021, "<|vision_end|>"),
                                         (1022, "<|image_pad|>"), (1023, "<|video_pad|>"))]
    folder = tmp / "demo"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    (folder / "config.json").write_text(json.dumps({"image_token_id": 1022, "video_token_id": 1023,
                                                    "vision_start_token_id": 1020, "vision_end_token_id": 1021,
                                                    "text_config": {"eos_token_id": 2}}))
    return folder


def test_the_model_folder_gets_the_demo_tokenizer_with_a_token_for_every_id(tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "rank"
    bench.write_model(bench.REAL_CONFIG, _small_qwen3_5(tmp_path), out, "rank", 2)
    config = json.loads((out / "config.json").read_text())
    assert config["image_token_id"] == 1022 and config["text_config"]["eos_token_id"] == 2
    assert "visual" in config["quantization_config"]["modules_to_not_convert"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == 124_160
    # the vision placeholders keep their ids (a larger vocabulary would otherwise renumber them) ...
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") == 1022
    # ... and any id the dummy weights may pick decodes
    assert tokenizer.decode([124_159, 5_000]) == "fill124159fill5000"


def test_kernel_time_is_summed_by_category_and_unknown_kernels_count_as_other(tmp_path):
    events = [{"cat": "kernel", "name": name, "dur": dur} for name, dur in (
        ("kernel_unified_attention", 2000), ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", 500),
        ("merge_16x16_to_64x64_inverse_kernel", 250), ("void cutlass::device_kernel<cutlass::gemm::kernel::G>", 3000),
        ("Marlin<256, 1, 8, 8>", 1000), ("nvjet_sm90_hsh_256x8_64x6_2x1_v_bz_TNT", 1500),
        ("triton_red_fused_rms_norm_5", 100))]
    events.append({"cat": "cpu_op", "name": "vllm::unified_attention_with_output", "dur": 99_999})  # not a kernel
    trace = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert bench.kernel_time_by_category(trace) == {"attention": 2.0, "GDN": 0.75, "AWQ GEMMs": 4.0,
                                                    "lm_head and dense GEMMs": 1.5, "other": 0.1}


def test_side_by_side_runs_are_named_and_ported_and_bad_ones_refused():
    assert bench.plan_runs(["native", "native:dv32768", "proxy-stock", "proxy-caovan:nosplit"]) == [
        ("native", "native", None, 8100, True), ("native-dv32768", "native", 32768, 8101, True),
        ("proxy-stock", "proxy-stock", None, 8102, True), ("proxy-caovan-nosplit", "proxy-caovan", None, 8103, False)]
    for bad in (["turing"], ["native:dv"], ["native:dv0"], ["native:32768"], ["native", "native"], ["native:nosplit"]):
        with pytest.raises(SystemExit):
            bench.plan_runs(bad)


RANK_FIXTURE = ROOT / "tests" / "caovan_kernels" / "profile" / "fixtures" / "qwen3_6_27b_awq_rank"
# The total that the 12-04 run's --gpu-memory-utilization 0.146559 for 22e9 bytes implies (22e9 / 0.146559).
H200_TORCH_TOTAL = 150_110_194_529


def _args(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def test_only_the_caovan_path_takes_the_split_kv_verify_and_a_long_decode_gets_room(tmp_path):
    configs = {}
    for path, split_kv in (("native", True), ("proxy-stock", True), ("proxy-caovan", True), ("proxy-caovan", False)):
        command, _ = bench.engine_command(path, RANK_FIXTURE, 8100, 22e9, 3, False, tmp_path, split_kv=split_kv,
                                          max_model_len=140_000, cuda_total_bytes=H200_TORCH_TOTAL)
        configs[path, split_kv] = json.loads(_args(command, "--additional-config")).get("caovan_split_kv", "auto")
        assert _args(command, "--max-model-len") == "140000" and command.count("--max-model-len") == 1
    assert configs == {("native", True): "off", ("proxy-stock", True): "off", ("proxy-caovan", True): "auto",
                       ("proxy-caovan", False): "off"}


def test_timed_runs_pin_prefix_caching_off_and_a_memory_fit_leaves_it_to_vllm(tmp_path):
    timed, env = bench.engine_command("proxy-caovan", RANK_FIXTURE, 8101, 22e9, 3, False, tmp_path,
                                      cuda_total_bytes=H200_TORCH_TOTAL)
    assert "--no-enable-prefix-caching" in timed and "--enforce-eager" not in timed
    assert _args(timed, "--gpu-memory-utilization") == "0.146559"  # 22e9 bytes of the GPU's (torch's) total
    assert env["CAOVAN_TURING_PROXY"] == "triton"

    fit, _ = bench.engine_command("native", RANK_FIXTURE, 8100, 22e9, 4, True, tmp_path, prefix_caching="default",
                                 enforce_eager=True, cuda_total_bytes=H200_TORCH_TOTAL)
    assert not {"--no-enable-prefix-caching", "--enable-prefix-caching"} & set(fit)
    assert {"--enforce-eager", "--language-model-only"} <= set(fit)
    assert json.loads(_args(fit, "--speculative-config"))["num_speculative_tokens"] == 4
    with pytest.raises(SystemExit, match="expected off or default"):
        bench.engine_command("native", RANK_FIXTURE, 8100, 22e9, 3, False, tmp_path, prefix_caching="on",
                             cuda_total_bytes=H200_TORCH_TOTAL)


def test_a_fit_reads_the_launch_profiles_prediction_from_the_same_log(tmp_path):
    """The engine log carries caovan-vllm-serve's decisions line; the fit holds vLLM's own lines to it."""
    from caovan_kernels.contract import KV_REPORT_DECISION, decisions_line, launcher_line
    from caovan_kernels.profile import build_profile, from_version_table, load_model_facts, memory

    inventory = tmp_path / "h200.json"
    inventory.write_text(json.dumps({"gpus": [{"name": "H200", "memory_gib": H200_TORCH_TOTAL / 2**30,
                                               "capability": "9.0"}]}))
    command, _ = bench.engine_command("native", RANK_FIXTURE, 8100, 22e9, 4, False, tmp_path,
                                      prefix_caching="default", cuda_total_bytes=H200_TORCH_TOTAL)
    user_args = command[command.index("--host"):]
    profile = build_profile(RANK_FIXTURE, user_args, str(inventory), from_version_table("0.26.0", "a test"))
    predicted = profile.memory["vllm_kv_cache_tokens"]
    log = "\n".join([
        "INFO 12-05 10:00:00 some line before",
        # the launcher prints each decision for people (the KV report's quotes vLLM's concurrency line), then its
        # decisions line for the daemon; neither is vLLM's
        *(launcher_line(f"{d.name} = {d.value}: {d.reason}") for d in profile.decisions),
        decisions_line([(d.name, d.value, d.reason) for d in profile.decisions], profile.args, True),
        "(EngineCore pid=1) INFO 12-05 10:01:00 [kv_cache_utils.py:1] GPU KV cache size: 250,000 tokens",
        "(EngineCore pid=1) INFO 12-05 10:01:00 [kv_cache_utils.py:1] Maximum concurrency for 80,000 tokens per "
        "request: 3.13x",
    ])
    facts = bench.engine_log_facts(log)
    assert facts["kv_cache_tokens"] == [250_000] and facts["max_concurrency"] == [3.13]
    assert facts["predicted_kv_cache_tokens"] == predicted > 0
    # the rank as a TP1 model, MTP=4, fp16 KV, fp32 GDN state, prefix caching on (0.26's default)
    layout = memory.cache_layout(load_model_facts(RANK_FIXTURE), 1, 4, 2, 4, prefix_caching=True)
    assert facts["predicted_concurrency"] == round(layout.concurrency(profile.memory["pool_bytes"], 80_000), 2)
    assert profile.decision(KV_REPORT_DECISION).value == f"{predicted} tokens"
    table = bench.fit_table([{"run": "fit-mtp4", "vllm": "0.26.0", "mtp": 4, "text_only": False,
                              "enforce_eager": False, "prefix_caching": "default", "log": facts}])
    assert f"| 250000 | {predicted} | {predicted / 250_000:.3f} | 3.13 |" in table
    assert bench.engine_log_facts("no decisions here")["predicted_kv_cache_tokens"] is None


def test_memory_fits_are_named_from_their_specs_and_bad_ones_refused():
    assert bench.plan_fits(["mtp3", "mtp4", "mtp3:text", "mtp3:graphs", "mtp3:text:graphs"]) == [
        ("fit-mtp3", 3, False, False), ("fit-mtp4", 4, False, False), ("fit-mtp3-text", 3, True, False),
        ("fit-mtp3-graphs", 3, False, True), ("fit-mtp3-text-graphs", 3, True, True)]
    for bad in (["mtp0"], ["mtp3:eager"], ["3"], ["mtp3", "mtp3"], ["mtp10"]):
        with pytest.raises(SystemExit):
            bench.plan_fits(bad)


def test_a_report_of_fits_alone_prints_the_fit_table_only(tmp_path, capsys):
    facts = bench.engine_log_facts("GPU KV cache size: 250,000 tokens\n"
                                   "Maximum concurrency for 80,000 tokens per request: 3.13x")
    (tmp_path / "fit-mtp3.json").write_text(json.dumps({
        "run": "fit-mtp3", "mtp": 3, "text_only": False, "enforce_eager": True, "prefix_caching": "default",
        "vllm": "0.26.0", "gpu": "H200", "cuda_total_bytes": 1, "nvml_total_bytes": 2, "nvml_reserved_bytes": 1,
        "log": facts}))
    (tmp_path / "fit-mtp3.engine.json").write_text("{}")  # the start's record, not a result
    bench.report(tmp_path)
    out = capsys.readouterr().out
    assert "TTFT" not in out
    assert "| fit-mtp3 | 0.26.0 | 3 | no | no | default | - | - | 250000 | - | - | 3.13 | - |" in out
    assert "H200: CUDA's total 1 B, NVML's 2 B of which the driver holds 1 B" in out


def _gpu(total: int, free: int, reserved: int):
    from caovan_kernels.profile import GpuInfo

    return GpuInfo(0, "H200", (9, 0), total, free, reserved_bytes=reserved)


def test_a_fit_waits_until_the_gpu_holds_under_a_gib_for_processes(monkeypatch):
    """NVML stands in (no GPU here): what the driver holds does not count as a process's memory."""
    import caovan_kernels.profile as profile
    from caovan_kernels.profile import Inventory

    readings = iter([Inventory((_gpu(100 << 30, 60 << 30, 1 << 29),), "nvml"),
                     Inventory((_gpu(100 << 30, 99 << 30, 1 << 29),), "nvml")])
    monkeypatch.setattr(profile, "detect_gpus", lambda: next(readings))
    monkeypatch.setattr(bench.time, "sleep", lambda s: None)
    bench.wait_for_quiet_gpu()  # 39.5 GiB held, then 0.5 GiB: returns at the second reading
    with pytest.raises(StopIteration):
        next(readings)

    monkeypatch.setattr(profile, "detect_gpus", lambda: Inventory((_gpu(100 << 30, 90 << 30, 0),), "nvml"))
    with pytest.raises(SystemExit, match="still holds 10.00 GiB"):
        bench.wait_for_quiet_gpu(timeout_s=0)
    monkeypatch.setattr(profile, "detect_gpus", lambda: Inventory((), "nvidia-ml-py is not installed"))
    with pytest.raises(SystemExit, match="nvidia-ml-py is not installed"):
        bench.wait_for_quiet_gpu()


def test_fits_run_one_engine_at_a_time_and_stop_each_whatever_happens(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(bench, "wait_for_quiet_gpu", lambda: calls.append("quiet"))
    monkeypatch.setattr(bench, "start", lambda path, model, out, budget, mtp, text, name, **kw: calls.append(
        ("start", path, mtp, text, name, kw["prefix_caching"], kw["enforce_eager"])))
    monkeypatch.setattr(bench, "stop", lambda name, out: calls.append(("stop", name)))
    monkeypatch.setattr(bench, "report", lambda out: calls.append("report"))

    def memory(name, out, timeout):
        calls.append(("memory", name))
        if name == "fit-mtp4":
            raise KeyboardInterrupt

    monkeypatch.setattr(bench, "memory", memory)
    with pytest.raises(KeyboardInterrupt):
        bench.fits(tmp_path, tmp_path, "proxy-caovan", ["mtp3:graphs", "mtp4", "mtp3:text"], 22e9, 60)
    assert calls == ["quiet", ("start", "proxy-caovan", 3, False, "fit-mtp3-graphs", "default", False),
                     ("memory", "fit-mtp3-graphs"), ("stop", "fit-mtp3-graphs"),
                     "quiet", ("start", "proxy-caovan", 4, False, "fit-mtp4", "default", True),
                     ("memory", "fit-mtp4"), ("stop", "fit-mtp4")]
