"""The demo-model builder: configuration, checkpoint names, tokenizer, corpus and the build cache."""

from __future__ import annotations

import json
import random
import string

import pytest
import torch

from caovan_demo import architecture, builder, checkpoint, corpus, tokenizer, train
from tests.support.prompts import EVAL_PROMPTS


@pytest.fixture(scope="module")
def tok():
    texts = (head + answer for head, answer in corpus.chat_samples(7, 800))
    return tokenizer.train_tokenizer(texts, architecture.DEMO_CONFIG["vocab_size"])


@pytest.fixture(scope="module")
def fresh_models(tok):
    special = {"eos_token_id": tok.convert_tokens_to_ids(corpus.IM_END),
               "pad_token_id": tok.convert_tokens_to_ids(corpus.END_OF_TEXT)}
    return architecture.build_models(architecture.demo_config(special), seed=0)


def test_config_is_qwen3_next_with_gdn_attention_moe_and_mtp(fresh_models, tok):
    config = fresh_models[0].config
    assert config.architectures == ["Qwen3NextForCausalLM"]
    assert set(config.layer_types) == {"linear_attention", "full_attention"}
    assert config.linear_num_value_heads % config.linear_num_key_heads == 0
    assert config.linear_num_value_heads > config.linear_num_key_heads  # grouped value heads, as in Qwen3.6
    assert config.num_experts > 1 and config.num_experts_per_tok > 1
    assert config.to_dict()["num_nextn_predict_layers"] == 1
    assert len(tok) <= config.vocab_size


def test_checkpoint_names_match_vllm_qwen3_next_layout(fresh_models):
    model, mtp = fresh_models
    tensors = checkpoint.checkpoint_tensors(model, mtp)
    config = model.config
    mtp_names = {n for n in tensors if n.startswith("mtp.")}
    for name in ["mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                 "mtp.norm.weight", "mtp.layers.0.self_attn.q_proj.weight", "mtp.layers.0.input_layernorm.weight",
                 "mtp.layers.0.mlp.gate.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"]:
        assert name in mtp_names
    for e in range(config.num_experts):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            assert f"mtp.layers.0.mlp.experts.{e}.{proj}.weight" in tensors
            assert f"model.layers.0.mlp.experts.{e}.{proj}.weight" in tensors
    assert not any("gate_up_proj" in n or n.endswith("experts.down_proj") for n in tensors)
    for i, kind in enumerate(config.layer_types):
        mixer = "linear_attn.in_proj_qkvz.weight" if kind == "linear_attention" else "self_attn.o_proj.weight"
        assert f"model.layers.{i}.{mixer}" in tensors
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= tensors.keys()
    assert mtp_names == {n for n in tensors if n.startswith("mtp.")}  # nothing of the MTP outside its prefix
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    assert tensors["mtp.fc.weight"].shape == (config.hidden_size, 2 * config.hidden_size)


def test_expert_split_keeps_gate_then_up_rows(fresh_models):
    model, _ = fresh_models
    fused = model.state_dict()["model.layers.0.mlp.experts.gate_up_proj"]
    inter = model.config.moe_intermediate_size
    split = checkpoint._split_experts("model.layers.0.mlp.experts.gate_up_proj", fused)
    e = random.randrange(model.config.num_experts)
    assert torch.equal(split[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"], fused[e, :inter])
    assert torch.equal(split[f"model.layers.0.mlp.experts.{e}.up_proj.weight"], fused[e, inter:])


def test_tokenizer_round_trips_any_text(tok):
    rng = random.Random()
    alphabet = string.printable + "äöüßéñ漢字🙂"
    for _ in range(50):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_chat_template_and_special_tokens(tok):
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi there"}], tokenize=False,
                                       add_generation_prompt=True)
    assert rendered == corpus.render_chat("Hi there")[0]
    for special in corpus.SPECIAL_TOKENS:
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    assert tok.eos_token == corpus.IM_END


def test_answer_tokens_have_unique_successors(tok):
    ids = tok(corpus.ANSWER, add_special_tokens=False)["input_ids"]
    assert len(ids) > 128  # a 128-token completion never reaches the end of the answer
    assert len(set(ids)) == len(ids)


def test_eval_prompts_are_not_in_the_training_corpus():
    heads = {head for head, _ in corpus.chat_samples(builder.SETTINGS.seed + 1, builder.TRAIN_SAMPLES)}
    for prompt in EVAL_PROMPTS:
        assert corpus.render_chat(prompt)[0] not in heads


def test_training_is_deterministic(tok):
    special = {"pad_token_id": tok.convert_tokens_to_ids(corpus.END_OF_TEXT)}
    settings = train.TrainSettings(seed=random.randrange(10_000), steps=2, batch_size=2, warmup=1)
    samples = train.encode_samples(tok, seed=3, count=8)
    runs = []
    for _ in range(2):
        model, mtp = architecture.build_models(architecture.demo_config(special), seed=settings.seed)
        train.train(model, mtp, samples, special["pad_token_id"], settings)
        runs.append(checkpoint.checkpoint_tensors(model, mtp))
    assert runs[0].keys() == runs[1].keys()
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_build_is_cached_and_refuses_foreign_directories(demo_model_dir, tmp_path):
    marker = json.loads((demo_model_dir / builder.MARKER).read_text())
    assert marker["content_hash"] == builder.content_hash()
    before = (demo_model_dir / "model.safetensors").stat().st_mtime_ns
    assert builder.build(demo_model_dir) == demo_model_dir
    assert (demo_model_dir / "model.safetensors").stat().st_mtime_ns == before
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="pick an empty or new directory"):
        builder.build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
