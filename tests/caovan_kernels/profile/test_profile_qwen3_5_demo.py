"""The profile, the doctor and config parsing on the tiny Qwen3.5 checkpoint's files (issue 13, item 3).

vLLM's CPU build cannot load this architecture here (its Qwen3.5 model file imports the vision stack, and PyPI's
torchvision is a CUDA build that breaks beside CPU torch), so what runs is everything that reads the files: our
config reader and profile, the doctor, and vLLM's / transformers' own config readers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from profile_cases import TWO_2080TI

from caovan_kernels.doctor.profile_checks import check_profile
from caovan_kernels.doctor.report import CheckStatus
from caovan_kernels.profile import build_profile, load_model_facts, parse_inventory


def _flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("--")]


@pytest.mark.parametrize("variant", ["bf16", "awq"])
def test_config_reader_sees_the_qwen3_5_architecture(variant, qwen3_5_model_dir, qwen3_5_awq_dir):
    model_dir = qwen3_5_awq_dir if variant == "awq" else qwen3_5_model_dir
    text = json.loads((model_dir / "config.json").read_text())["text_config"]
    m = load_model_facts(model_dir)
    assert m.architecture == "Qwen3_5ForConditionalGeneration" and m.dtype == "bfloat16"
    assert (m.num_gdn_layers, m.num_attention_layers) == (3, 1)
    assert (m.num_attention_heads, m.num_key_value_heads, m.head_dim) == (text["num_attention_heads"],
                                                                         text["num_key_value_heads"], 256)
    assert (m.gdn_key_heads, m.gdn_value_heads) == (text["linear_num_key_heads"], text["linear_num_value_heads"])
    assert m.attn_output_gate and m.num_experts == 0 and m.intermediate_size == text["intermediate_size"]
    assert m.mtp_layers == 1 and m.ssm_state_dtype == "float32" and m.vision is not None
    if variant == "awq":
        q = m.quantization
        assert (q.method, q.bits, q.group_size) == ("awq", 4, 128)
        assert not q.converts("model.language_model.layers.0.linear_attn.in_proj_a")
        assert q.converts("model.language_model.layers.0.linear_attn.in_proj_qkv")
    else:
        assert m.quantization is None


def test_profile_on_2x2080ti_makes_the_real_models_decisions(qwen3_5_awq_dir, qwen36_dir, installed_vllm):
    tiny = build_profile(qwen3_5_awq_dir, [], TWO_2080TI, installed_vllm)
    real = build_profile(qwen36_dir, [], TWO_2080TI, installed_vllm)
    assert _flags(tiny.args) == _flags(real.args)
    for name in ("dtype", "DynamicTP", "custom-all-reduce", "max-num-seqs", "Elastic-KV dtype"):
        assert tiny.decision(name).value == real.decision(name).value, name
    # A tiny model holds its whole (short) context for every sequence with room to spare: Elastic-KV stops at the
    # model's maximum and AutoSpec grants MTP=4, where the real model's 262144-token context keeps it at MTP=3.
    assert tiny.decision("Elastic-KV").value == str(load_model_facts(qwen3_5_awq_dir).max_position_embeddings)
    assert json.loads(tiny.decision("AutoSpec").value)["num_speculative_tokens"] == 4
    assert json.loads(real.decision("AutoSpec").value)["num_speculative_tokens"] == 3
    assert "vision tower" in {d.name for d in tiny.decisions}


def test_profile_on_one_gpu_and_on_the_cpu(qwen3_5_awq_dir, qwen3_5_model_dir, installed_vllm):
    one = build_profile(qwen3_5_awq_dir, [], "1x RTX 2080 Ti 22GB sm75", installed_vllm)
    assert one.decision("DynamicTP").value == "1" and "--tensor-parallel-size" not in one.args
    assert one.args[one.args.index("--dtype") + 1] == "half"
    cpu = build_profile(qwen3_5_model_dir, [], "cpu", installed_vllm)
    assert cpu.args[:2] == ["--dtype", "bfloat16"] and "--no-enable-prefix-caching" in cpu.args
    assert json.loads(cpu.args[cpu.args.index("--speculative-config") + 1]) == {
        "method": "mtp", "num_speculative_tokens": 3}


def test_doctor_profile_checks_pass_on_the_tiny_checkpoint(qwen3_5_awq_dir):
    checks = {c.name: c for c in check_profile(qwen3_5_awq_dir, parse_inventory(TWO_2080TI))}
    assert {checks[n].status for n in ("AutoSpec", "AutoMem", "Elastic-KV")} == {CheckStatus.PASS}
    assert "MTP=4" in checks["AutoSpec"].detail


def test_caovan_doctor_with_the_model_on_this_machine(qwen3_5_awq_dir):
    proc = subprocess.run([sys.executable, "-m", "caovan_kernels.doctor", "--json", "--only", "profile", "--model",
                           str(qwen3_5_awq_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["AutoSpec"]["status"] == "PASS" and "mtp" in checks["AutoSpec"]["detail"]
    assert checks["AutoMem"]["status"] == "SKIP"  # no GPU here


def test_vllm_and_transformers_read_the_config(qwen3_5_awq_dir):
    """vLLM's own config reader (no model class needed), its MTP mapping and its AWQ config parser."""
    from transformers import AutoConfig
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.transformers_utils.config import get_config

    hf = get_config(str(qwen3_5_awq_dir), trust_remote_code=False)
    assert type(hf).__name__ == "Qwen3_5Config" and hf.text_config.model_type == "qwen3_5_text"
    assert type(AutoConfig.from_pretrained(str(qwen3_5_awq_dir))) is type(hf)
    draft = SpeculativeConfig.hf_config_override(get_config(str(qwen3_5_awq_dir), trust_remote_code=False))
    assert draft.architectures == ["Qwen3_5MTP"]
    awq = AutoAWQConfig.from_config(hf.quantization_config)
    assert (awq.weight_bits, awq.group_size, awq.zero_point) == (4, 128, True)
    assert awq.get_min_capability() <= 75  # vLLM's AWQ runs on Turing
