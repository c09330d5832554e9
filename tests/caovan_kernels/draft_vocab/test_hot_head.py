"""The drafter's hot logits equal the plain reference (full logits, minus infinity outside the hot set), whole or
split across tensor-parallel shards; random inputs, seed printed (CAOVAN_TEST_SEED replays)."""

from __future__ import annotations

import torch

from caovan_kernels.draft_vocab.hot_head import HotRows
from caovan_kernels.draft_vocab.naive import masked_logits


def _case(gen: torch.Generator, vocab: int = 997, hidden: int = 48, tokens: int = 5, hot: int = 131):
    weight = torch.randn(vocab, hidden, generator=gen)
    x = torch.randn(tokens, hidden, generator=gen)
    ids = sorted(torch.randperm(vocab, generator=gen)[:hot].tolist())
    return weight, x, ids


def test_hot_logits_equal_the_masked_full_logits(gen: torch.Generator) -> None:
    weight, x, ids = _case(gen)
    got = HotRows(weight, ids, 0, weight.shape[0]).logits(x)
    want = masked_logits(x, weight, ids)
    assert got.shape == want.shape
    hot = torch.zeros(weight.shape[0], dtype=torch.bool)
    hot[ids] = True
    assert torch.isfinite(got[:, hot]).all(), "a hot id was left unscored"
    assert torch.isneginf(got[:, ~hot]).all(), "an id outside the hot set was scored"
    torch.testing.assert_close(got[:, hot], want[:, hot], rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_shards_of_a_vocabulary_parallel_head_rebuild_the_whole(gen: torch.Generator) -> None:
    """Two ranks, each with its half of the rows (the second padded with rows past the vocabulary, as vLLM pads its
    vocabulary-parallel head): their logits side by side, padding cut, are the whole head's."""
    weight, x, ids = _case(gen, vocab=1001)
    half = 512
    padded = torch.cat([weight, torch.randn(2 * half - weight.shape[0], weight.shape[1], generator=gen)])
    shards = [HotRows(padded[r * half:(r + 1) * half], ids, r * half, min((r + 1) * half, weight.shape[0]))
              for r in range(2)]
    got = torch.cat([s.logits(x) for s in shards], dim=-1)[:, :weight.shape[0]]
    want = masked_logits(x, weight, ids)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-5, atol=1e-5)
    assert torch.isneginf(torch.cat([s.logits(x) for s in shards], dim=-1)[:, weight.shape[0]:]).all()


def test_a_shard_without_hot_ids_scores_nothing(gen: torch.Generator) -> None:
    weight, x, _ = _case(gen)
    rows = HotRows(weight[:100], [500, 600], 0, 100)
    assert rows.bytes == 0 and torch.isneginf(rows.logits(x)).all()


def test_rows_are_copied_from_the_weight_they_were_built_on(gen: torch.Generator) -> None:
    weight, x, ids = _case(gen)
    rows = HotRows(weight, ids, 0, weight.shape[0])
    assert rows.copied_from(weight) and not rows.copied_from(weight.clone())
    assert rows.bytes == len(ids) * weight.shape[1] * weight.element_size()
