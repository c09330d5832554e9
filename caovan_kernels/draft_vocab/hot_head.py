"""The drafter's lm_head over the hot vocabulary: the hot ids' rows of one rank's shard, copied once, scored per pass.

A drafter pass reads K rows instead of the shard's whole vocabulary; the logits it hands on keep the shard's width,
minus infinity where an id is not hot, so vLLM's gather across ranks and its argmax work on them unchanged.
naive.masked_logits is what these logits must equal."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class HotRows:
    """The rows of `weight` (one rank's lm_head shard: [rows, hidden], row r is token id `first_id + r`) whose ids are
    in `hot_ids`; ids outside the shard are another rank's."""

    def __init__(self, weight: torch.Tensor, hot_ids: Sequence[int], first_id: int, last_id: int) -> None:
        local = [i - first_id for i in hot_ids if first_id <= i < last_id]
        self.index = torch.tensor(local, dtype=torch.long, device=weight.device)
        self.rows = weight.detach().index_select(0, self.index).contiguous()
        self.width = weight.shape[0]
        # Which tensor the rows came from: a drafter that takes the target's lm_head after loading gets new rows.
        self.source = (weight.data_ptr(), tuple(weight.shape))

    def copied_from(self, weight: torch.Tensor) -> bool:
        return self.source == (weight.data_ptr(), tuple(weight.shape))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[tokens, rows] logits of this shard: the hot rows scored, every other row minus infinity."""
        out = hidden.new_full((hidden.shape[0], self.width), float("-inf"))
        if self.index.numel():
            out.index_copy_(1, self.index, hidden @ self.rows.T)
        return out

    @property
    def bytes(self) -> int:
        """The memory the copied rows take."""
        return self.rows.numel() * self.rows.element_size()
