"""The plain-torch reference for the drafter's hot logits: score every id, then rule out those not in the hot set."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def masked_logits(hidden: torch.Tensor, weight: torch.Tensor, hot_ids: Sequence[int]) -> torch.Tensor:
    """[tokens, vocab] logits of the full `weight` [vocab, hidden], minus infinity outside `hot_ids`."""
    full = hidden @ weight.T
    keep = torch.zeros(full.shape[-1], dtype=torch.bool, device=full.device)
    keep[torch.as_tensor(list(hot_ids), dtype=torch.long, device=full.device)] = True
    return full.masked_fill(~keep, float("-inf"))
