"""The Qwen3.5 demo model: Qwen3.6-27B-AWQ's architecture and config keys scaled down, trained so that its MTP
head's drafts are accepted (measured with transformers: vLLM's CPU build cannot serve this architecture here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast, Qwen3_5ForConditionalGeneration
from typer.testing import CliRunner

import caovan_manager.cli.demo_model  # noqa: F401  (registers `caovan demo-model`)
from caovan_demo import builder, checkpoint_qwen3_5, mtp_eval, qwen3_5_recipe
from caovan_demo.awq import dequantize_tensors
from caovan_manager.cli.app import app
from tests.support.prompts import EVAL_PROMPTS

REAL = Path(__file__).resolve().parents[1] / "caovan_kernels" / "profile" / "fixtures" / "qwen3_6_27b_awq" / "config.json"
LAYERS = {"linear_attention", "full_attention"}


@pytest.fixture(scope="module")
def real_config() -> dict:
    return json.loads(REAL.read_text())


@pytest.fixture(scope="module")
def bf16(qwen3_5_model_dir):
    return checkpoint_qwen3_5.load(qwen3_5_model_dir)


@pytest.fixture(scope="module")
def awq(qwen3_5_awq_dir):
    return checkpoint_qwen3_5.load(qwen3_5_awq_dir)


@pytest.fixture(scope="module")
def tok(qwen3_5_model_dir) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(str(qwen3_5_model_dir))


def _config(model_dir: Path) -> dict:
    return json.loads((model_dir / "config.json").read_text())


def test_config_has_the_real_models_keys_and_shape(qwen3_5_model_dir, qwen3_5_awq_dir, real_config):
    ours = _config(qwen3_5_awq_dir)
    assert ours["architectures"] == real_config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert ours["model_type"] == real_config["model_type"]
    assert ours["tie_word_embeddings"] is real_config["tie_word_embeddings"] is False
    text, real_text = ours["text_config"], real_config["text_config"]
    assert set(real_text) - set(text) == set(), "keys of the real text_config missing from the demo's"
    for key in ("model_type", "attn_output_gate", "head_dim", "linear_conv_kernel_dim", "mtp_num_hidden_layers",
                "mamba_ssm_dtype", "hidden_act", "full_attention_interval", "dtype"):
        assert text[key] == real_text[key], key
    for key in ("partial_rotary_factor", "rope_type"):
        assert text["rope_parameters"][key] == real_text["rope_parameters"][key], key
    # The layer pattern: blocks of 3 GDN layers and 1 full-attention layer.
    period = real_text["full_attention_interval"]
    assert text["layer_types"] == real_text["layer_types"][: text["num_hidden_layers"]]
    assert text["num_hidden_layers"] % period == 0
    assert text["num_key_value_heads"] < text["num_attention_heads"]  # grouped KV heads
    assert text["num_attention_heads"] % text["num_key_value_heads"] == 0
    assert text["linear_num_value_heads"] % text["linear_num_key_heads"] == 0
    assert text["linear_num_value_heads"] > text["linear_num_key_heads"]
    assert "intermediate_size" in text and "num_experts" not in text  # dense FFN
    assert ours["vision_config"]["out_hidden_size"] == text["hidden_size"]
    assert ours["quantization_config"] == real_config["quantization_config"]
    bf16_config = _config(qwen3_5_model_dir)
    assert "quantization_config" not in bf16_config
    assert {k: v for k, v in ours.items() if k != "quantization_config"} == bf16_config


def test_transformers_loads_it_as_the_real_class_with_every_weight(qwen3_5_model_dir, bf16, tok):
    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(str(qwen3_5_model_dir), output_loading_info=True,
                                                                  dtype=torch.float32)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    # transformers has no MTP module: those weights (and only those) are for vLLM's Qwen3_5MTP.
    assert {k for k in info["unexpected_keys"] if not k.startswith("mtp.")} == set()
    ids = tok("Hello there", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        full = model(input_ids=ids).logits
        text = bf16.text(input_ids=ids).logits
    torch.testing.assert_close(full, text)


def test_mtp_weights_are_what_vllms_qwen3_5_mtp_loads(qwen3_5_model_dir):
    from safetensors import safe_open

    with safe_open(str(qwen3_5_model_dir / checkpoint_qwen3_5.WEIGHTS), "pt") as f:
        mtp = {k for k in f.keys() if k.startswith("mtp.")}
    layer = "mtp.layers.0."
    want = {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight",
            f"{layer}input_layernorm.weight", f"{layer}post_attention_layernorm.weight"}
    want |= {f"{layer}self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
    want |= {f"{layer}mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")}
    assert mtp == want


def test_awq_checkpoint_converts_every_linear_but_the_gdn_a_b_projections(qwen3_5_awq_dir, bf16):
    from safetensors.torch import load_file

    tensors = load_file(str(qwen3_5_awq_dir / checkpoint_qwen3_5.WEIGHTS))
    linears = checkpoint_qwen3_5.linear_modules(bf16)
    kept = [m for m in linears if "in_proj_a" in m or "in_proj_b" in m]
    assert len(kept) == 2 * 3  # a and b of each of the 3 GDN layers
    for module in linears:
        if module in kept:
            assert f"{module}.weight" in tensors and f"{module}.qweight" not in tensors
        else:
            assert {f"{module}.{s}" for s in ("qweight", "qzeros", "scales")} <= tensors.keys(), module
            assert f"{module}.weight" not in tensors
            assert tensors[f"{module}.qweight"].dtype == torch.int32 and tensors[f"{module}.scales"].dtype == torch.float16
    assert any(m.startswith("model.visual.") for m in linears if m not in kept)
    assert any(m.startswith("mtp.") for m in linears if m not in kept)
    assert tensors["lm_head.weight"].dtype == torch.bfloat16  # AWQ keeps the LM head


def test_awq_weights_are_close_to_the_bf16_ones(qwen3_5_model_dir, qwen3_5_awq_dir):
    from safetensors.torch import load_file

    ref = load_file(str(qwen3_5_model_dir / checkpoint_qwen3_5.WEIGHTS))
    stored = load_file(str(qwen3_5_awq_dir / checkpoint_qwen3_5.WEIGHTS))
    quant = dequantize_tensors(stored, 128, torch.float32)
    assert quant.keys() == ref.keys()
    converted = {n[: -len(".qweight")] + ".weight" for n in stored if n.endswith(".qweight")}
    errors = {n: ((quant[n] - ref[n].float()).norm() / ref[n].float().norm()).item() for n in converted}
    print(f"\nAWQ vs bf16: {len(errors)} converted weights, relative error median "
          f"{sorted(errors.values())[len(errors) // 2]:.4f}, max {max(errors.values()):.4f}")
    for name in ref.keys() - converted:  # everything else is stored as it was
        assert torch.equal(quant[name], ref[name]), name
    # Round to nearest over 16 levels per 128-wide group: about 0.1 for Gaussian-like weights.
    assert max(errors.values()) < 0.15


def test_mtp_drafts_are_accepted_on_held_out_prompts(bf16, awq, tok):
    """Like the embedded default's engine test: greedy 128-token chats of ten ordinary prompts, MTP=3."""
    results = {}
    for name, demo in (("bf16", bf16), ("awq", awq)):
        results[name] = mtp_eval.measure(demo.text, demo.mtp, tok, EVAL_PROMPTS)
        print(f"\n{name}: {results[name].describe()}")
    # The demo recites one answer: a head that learned it drafts all three tokens right nearly always.
    assert results["bf16"].rate >= 0.95 and results["bf16"].mean_length >= 3.8
    assert results["awq"].rate >= 0.90 and results["awq"].mean_length >= 3.6


def test_quantized_model_still_answers_like_the_bf16_one(bf16, awq, tok):
    head = tok.apply_chat_template([{"role": "user", "content": EVAL_PROMPTS[0]}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(head, add_special_tokens=False)["input_ids"]
    assert mtp_eval.greedy(awq.text, ids, 64) == mtp_eval.greedy(bf16.text, ids, 64)


def _naive_drafts(model, mtp, hidden, seq, t, steps):
    """One round drafted on its own, growing the draft layer's input one position per step (vLLM's order)."""
    embed, lm_head = model.model.embed_tokens, model.lm_head
    x_embed, x_hidden, drafts = embed(seq[1 : t + 2]).unsqueeze(0), hidden[:, : t + 1], []
    for _ in range(steps):
        positions = torch.arange(x_embed.shape[1]).unsqueeze(0)
        out = mtp(x_embed, x_hidden, model.model.rotary_emb(x_hidden, positions), None)
        token = int(lm_head(out[:, -1]).argmax(-1))
        drafts.append(token)
        x_embed = torch.cat([x_embed, embed(torch.tensor([[token]]))], dim=1)
        x_hidden = torch.cat([x_hidden, out[:, -1:]], dim=1)
    return drafts


def test_batched_drafter_equals_drafting_round_by_round(gen):
    from caovan_demo import architecture_qwen3_5

    ids = {"eos_token_id": 2, "pad_token_id": 0, "bos_token_id": 0}
    vision = {"image_token_id": 1020, "video_token_id": 1021, "vision_start_token_id": 1022,
              "vision_end_token_id": 1023}
    seed = int(torch.randint(1 << 30, (1,), generator=gen))
    demo = architecture_qwen3_5.build_models(architecture_qwen3_5.demo_config(ids, vision), seed)
    seq = torch.randint(0, 1000, (24,), generator=gen)
    with torch.no_grad():
        hidden = demo.text.model(input_ids=seq.unsqueeze(0)).last_hidden_state
        batched = mtp_eval._drafts(demo.text, demo.mtp, hidden, seq, 3)
        for t in (0, 7, 22):
            assert batched[:, t].tolist() == _naive_drafts(demo.text, demo.mtp, hidden, seq, t, 3), t


def test_builds_are_cached_per_variant(qwen3_5_model_dir, qwen3_5_awq_dir):
    for name, path in (("qwen3_5", qwen3_5_model_dir), ("qwen3_5-awq", qwen3_5_awq_dir)):
        marker = json.loads((path / builder.MARKER).read_text())
        assert marker["variant"] == name and marker["content_hash"] == builder.content_hash(name)
        assert path == builder.default_dir(name) and path.name.startswith(f"{name}-")
        assert builder.build(name=name) == path
    assert builder.default_dir().name == builder.content_hash()  # the default keeps its place
    assert len({builder.content_hash(n) for n in builder.VARIANTS}) == len(builder.VARIANTS)
    assert json.loads((qwen3_5_awq_dir / builder.MARKER).read_text())["source"] == qwen3_5_model_dir.name


def test_cli_options_and_their_errors():
    runner = CliRunner()
    bad = runner.invoke(app, ["demo-model", "--awq"])
    assert bad.exit_code == 2 and "--arch qwen3_5" in bad.stderr
    unknown = runner.invoke(app, ["demo-model", "--arch", "llama"])
    assert unknown.exit_code == 2 and "qwen3_next" in unknown.output
    with pytest.raises(builder.UnknownVariantError, match="there are qwen3_next, qwen3_5, qwen3_5-awq"):
        builder.build(name="qwen9")


def test_modules_left_unquantized_are_the_real_configs(real_config):
    assert list(qwen3_5_recipe.MODULES_TO_NOT_CONVERT) == real_config["quantization_config"]["modules_to_not_convert"]


def test_image_processor_config_matches_the_vision_tower(qwen3_5_model_dir):
    """vLLM builds the model's multimodal processor at start; its image side must agree with the vision tower.
    (The video side, Qwen3VLVideoProcessor, needs torchvision, so it loads only where CUDA vLLM runs.)"""
    from transformers import AutoImageProcessor

    vision = _config(qwen3_5_model_dir)["vision_config"]
    image = AutoImageProcessor.from_pretrained(str(qwen3_5_model_dir))
    assert (image.patch_size, image.temporal_patch_size, image.merge_size) == (
        vision["patch_size"], vision["temporal_patch_size"], vision["spatial_merge_size"])
