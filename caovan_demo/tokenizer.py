"""Byte-level BPE tokenizer for the demo model, trained on the demo corpus alone (no hub, no network)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .corpus import CHAT_TEMPLATE, END_OF_TEXT, IM_END, SPECIAL_TOKENS, chat_samples


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE (GPT-2 style byte alphabet, so any input text round-trips)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    tokenizer.save_pretrained(str(out_dir))


def demo_tokenizer(seed: int, samples: int, vocab_size: int,
                   extra_special: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """The tokenizer of a demo model, trained on `samples` chats of the corpus; `extra_special` tokens (a model's
    placeholders that no text produces) are added after training and fill the last ids of the vocabulary."""
    tok = train_tokenizer((head + answer for head, answer in chat_samples(seed, samples)),
                          vocab_size - len(extra_special))
    if extra_special:
        tok.add_special_tokens({"additional_special_tokens": list(extra_special)})
    return tok


def special_ids(tok: PreTrainedTokenizerFast) -> dict[str, int]:
    """The config's eos / pad / bos ids: Qwen's chat end token ends a turn; <|endoftext|> pads."""
    return {"eos_token_id": tok.convert_tokens_to_ids(IM_END), "pad_token_id": tok.convert_tokens_to_ids(END_OF_TEXT),
            "bos_token_id": tok.convert_tokens_to_ids(END_OF_TEXT)}
