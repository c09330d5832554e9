"""The split-KV attention backend wired into the installed vLLM's own Triton attention classes: the registry seam,
the verify batch taken through our kernel (in Triton's interpreter here) on vLLM's cache layouts, the layers and
batches left to vLLM, and the engine-level verdict lines."""

from __future__ import annotations

import types

import pytest
import torch

from caovan_kernels import contract
from caovan_kernels.attention import plan, reference
from caovan_kernels.attention.split_kv import SplitWorkspace
from caovan_kernels.gdn.accuracy import rel_err
from caovan_kernels.vllm import attention_seam, split_kv_backend
from caovan_kernels.vllm.split_kv_backend import CaovanTritonAttentionImpl, SplitBatch, kv_caches


def _impl(**overrides) -> CaovanTritonAttentionImpl:
    args = {"num_heads": 12, "head_size": 64, "scale": 0.125, "num_kv_heads": 2, "alibi_slopes": None,
            "sliding_window": None, "kv_cache_dtype": "auto"}
    return CaovanTritonAttentionImpl(**(args | overrides))


def test_the_installed_vllm_offers_the_registry_seam_and_it_resolves_to_our_backend():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    check = attention_seam.register_attention_backend()
    try:
        assert check.status == "PASS", check.reason
        assert AttentionBackendEnum.TRITON_ATTN.get_path() == attention_seam.BACKEND
        backend = AttentionBackendEnum.TRITON_ATTN.get_class()
        assert backend.get_name() == "TRITON_ATTN"  # vLLM still knows it by its own name
        assert backend.get_impl_cls() is CaovanTritonAttentionImpl
    finally:
        AttentionBackendEnum.TRITON_ATTN.clear_override()


@pytest.mark.parametrize("layout", ["halves", "stacked"])
def test_a_verify_batch_runs_through_the_split_kernel_on_vllms_cache_layout(gen, layout):
    blocks, block_size, kv_heads, dim = 11, 16, 2, 64
    if layout == "halves":  # vLLM 0.26 and later: [blocks, kv_heads, block_size, 2 * dim]
        kv_cache = torch.randn((blocks, kv_heads, block_size, 2 * dim), generator=gen).half()
    else:  # vLLM 0.21: [blocks, 2, block_size, kv_heads, dim]
        kv_cache = torch.randn((blocks, 2, block_size, kv_heads, dim), generator=gen).half()
    seq_lens = torch.tensor([70, 33], dtype=torch.int32)
    cu = torch.tensor([0, 4, 7], dtype=torch.int32)
    table = torch.randperm(blocks - 1, generator=gen).int().view(2, 5) + 1  # block 0 unused, as vLLM's null block
    query = torch.randn((7, 12, dim), generator=gen).half()
    launch = plan.plan_launch(2, kv_heads, 6, 4, sms=4)
    meta = types.SimpleNamespace(num_actual_tokens=7, block_table=table, seq_lens=seq_lens, query_start_loc=cu,
                                 caovan_split=SplitBatch(launch, SplitWorkspace.allocate(launch.programs(2, 2), launch.rows,
                                                                                         dim, query.device), 8))
    output = torch.full_like(query, float("nan"))
    impl = _impl()
    assert impl.forward(None, query, None, None, kv_cache, meta, output) is output
    key_cache, value_cache = kv_caches(kv_cache, dim)
    expected = reference.paged_attention(query, key_cache, value_cache, table, seq_lens, cu, 0.125)
    assert rel_err(output, expected) < 2e-3


def test_layers_the_kernel_does_not_compute_keep_vllms_attention(caplog):
    assert _impl()._caovan_refusal is None
    assert _impl(sliding_window=4096)._caovan_refusal == "sliding window 4096"
    assert _impl(logits_soft_cap=30.0)._caovan_refusal == "soft cap 30.0"
    assert _impl(alibi_slopes=[0.5] * 12)._caovan_refusal == "ALiBi"
    assert _impl(kv_cache_dtype="int8_per_token_head")._caovan_refusal == "KV cache dtype int8_per_token_head"
    assert f"{contract.SPLIT_KV} a layer keeps vLLM's attention for its verify: sliding window 4096" in caplog.text


def test_an_unknown_cache_layout_is_not_guessed():
    assert kv_caches(torch.zeros((3, 16, 2, 64)), 64) is None  # K alone, no V beside it
    assert kv_caches(torch.zeros((3, 2, 16, 2, 32)), 64) is None


def _engine(tokens: int | None, split_kv: str = "auto", max_num_seqs: int = 4):
    speculative = None if tokens is None else types.SimpleNamespace(num_speculative_tokens=tokens)
    return types.SimpleNamespace(additional_config={"caovan_split_kv": split_kv}, speculative_config=speculative,
                                 model_config=types.SimpleNamespace(dtype=torch.float16),
                                 scheduler_config=types.SimpleNamespace(max_num_seqs=max_num_seqs))


def _builder(q_heads: int = 12, kv_heads: int = 2, head_dim: int = 256):
    return types.SimpleNamespace(num_heads_q=q_heads, num_heads_kv=kv_heads, headdim=head_dim)


@pytest.mark.parametrize("engine,device,why", [
    (_engine(3, "off"), "cuda", "caovan_split_kv=off"),
    (_engine(3), "cpu", "no CUDA device"),
    (_engine(None), "cuda", "no speculative decoding"),
])
def test_the_engine_verdict_says_why_the_split_path_is_off(caplog, engine, device, why):
    split_kv_backend.emit_once.__globals__["_printed"].clear()
    assert split_kv_backend._Planner.for_engine(_builder(), engine, torch.device(device)) is None
    verdict = contract.read_marker(caplog.records[-1].getMessage())
    assert verdict is not None and verdict[0] is contract.SPLIT_KV_MARKER
    assert not verdict[1]["active"] and verdict[1]["detail"].startswith(why)


def test_a_bad_setting_names_the_key_and_the_choices():
    from caovan_kernels.errors import PluginConfigError
    from caovan_kernels.vllm.settings import EnginePluginSettings

    with pytest.raises(PluginConfigError, match='key "caovan_split_kv" is \'maybe\'; use one of auto, off'):
        EnginePluginSettings().with_additional_config({"caovan_split_kv": "maybe"})
    with pytest.raises(PluginConfigError, match="CAOVAN_SPLIT_KV"):
        EnginePluginSettings.from_env({"CAOVAN_SPLIT_KV": "on"})


def test_the_plugin_leaves_triton_attention_alone_when_told_to():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from caovan_kernels.vllm import plugin
    from caovan_kernels.vllm.settings import EnginePluginSettings

    stock = AttentionBackendEnum.TRITON_ATTN.get_path()
    assert stock.startswith("vllm.v1.attention.backends"), stock
    try:
        for env, expected in (({"CAOVAN_SPLIT_KV": "off"}, stock), ({}, attention_seam.BACKEND)):
            plugin._split_kv(EnginePluginSettings.from_env(env))
            assert AttentionBackendEnum.TRITON_ATTN.get_path() == expected, env
    finally:
        AttentionBackendEnum.TRITON_ATTN.clear_override()


def test_a_planner_tags_only_the_batches_its_workspace_and_the_plan_take():
    workspace = SplitWorkspace.allocate(plan.max_programs(2, 6, 4, 8, 2), plan.rows_for(4, 6), 256,
                                        torch.device("cpu"))
    planner = split_kv_backend._Planner(2, 6, 4, 8, True, workspace)

    def meta(batch: int, max_query_len: int, **extra):
        return types.SimpleNamespace(max_query_len=max_query_len, seq_lens=torch.ones(batch, dtype=torch.int32),
                                     **extra)

    tagged = planner.batch(meta(1, 4))
    assert tagged is not None and tagged.launch == plan.plan_launch(1, 2, 6, 4, 8) and tagged.workspace is workspace
    assert planner.batch(meta(2, 3)).launch.splits == plan.plan_launch(2, 2, 6, 3, 8).splits
    assert planner.batch(meta(1, 1)) is None  # pure decode: vLLM's own split launch
    assert planner.batch(meta(1, 5)) is None  # more query tokens than the engine's MTP verifies: a prefill chunk
    assert planner.batch(meta(3, 4)) is None  # a batch beyond the workspace (sized for 2 sequences)
    assert planner.batch(meta(1, 4, causal=torch.ones(1, dtype=torch.bool))) is None  # per-sequence causality
