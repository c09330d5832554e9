"""vLLM's MTP drafters with DraftVocab: the same classes, registered under the same architecture names, whose
drafting logits cover the hot vocabulary when the launch sets caovan_draft_vocab (and are vLLM's own otherwise).

Why this seam: vLLM builds the drafter from the architecture name its speculative config writes into the draft
config (Qwen3NextMTP, Qwen3_5MTP, Qwen3_5MoeMTP in vLLM 0.21 to 0.32), and a plugin may register a model class
under a name vLLM already has. Every proposer drafts through the drafter's `compute_logits` (argmax, or sampling
with the same logits as q) or, with use_local_argmax_reduction, through `get_top_tokens`; both are overridden.

The target verifies every draft with its full lm_head, so what is served does not change: greedy outputs are the
target's argmax whatever was drafted, and vLLM's rejection sampler keeps sampling exact for any draft chosen from the
context (docs/verification.md, "DraftVocab"). Only the acceptance rate can move.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from pathlib import Path
from typing import Any

import torch

from caovan_kernels.contract import DraftVocabVerdict
from caovan_kernels.logger import log

from .hot_head import HotRows
from .hot_set import SETTING, DraftVocabSpec, HotVocab, build, control_token_ids

# vLLM's MTP drafter classes by architecture name, and the vLLM module that defines each.
DRAFTERS = {"Qwen3NextMTP": "qwen3_next_mtp", "Qwen3_5MTP": "qwen3_5_mtp", "Qwen3_5MoeMTP": "qwen3_5_mtp"}


def register() -> list[str]:
    """Register our drafter for each of vLLM's that imports here; the names registered. (vLLM's Qwen3.5 module
    needs torchvision, which the CPU build lacks: that drafter is left alone there, as vLLM cannot serve the model.)"""
    from vllm import ModelRegistry

    names = []
    registry_log = logging.getLogger("vllm.model_executor.models.registry")
    quiet = registry_log.level
    # vLLM 0.21 warns that a name it has "will be overwritten": here that is the point, and the class behaves as
    # vLLM's own unless caovan_draft_vocab is set (then the DraftVocab line says so).
    registry_log.setLevel(logging.ERROR)
    try:
        for name, module in DRAFTERS.items():
            if module == "qwen3_5_mtp" and importlib.util.find_spec("torchvision") is None:
                continue  # importing it would fail on torchvision, after transformers has warned about it in the log
            try:
                base = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), name)
            except (ImportError, AttributeError):
                continue
            ModelRegistry.register_model(name, drafter_class(base))
            names.append(name)
    finally:
        registry_log.setLevel(quiet)
    return names


def drafter_class(base: type) -> type:
    """`base` (one of vLLM's MTP drafters) with DraftVocab."""

    class HotVocabDrafter(base):  # type: ignore[misc, valid-type]
        def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
            super().__init__(vllm_config=vllm_config, prefix=prefix)
            self._caovan_hot = hot_vocab_for(vllm_config)
            self._caovan_rows: HotRows | None = None
            self._caovan_refused = False
            self._caovan_tp = 1

        def __setattr__(self, name: str, value: Any) -> None:
            super().__setattr__(name, value)
            # vLLM gives the drafter the target's lm_head once both are loaded: copy its hot rows then, so that the
            # copy is in vLLM's memory profile (it is taken before the KV cache is sized).
            if name == "lm_head" and self.__dict__.get("_caovan_hot") is not None:
                self._caovan_refused = False  # a new head is judged afresh
                self._caovan_take_rows()

        def compute_logits(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor | None:
            rows = self._caovan_current_rows()
            if rows is None:
                return super().compute_logits(hidden_states, *args, **kwargs)
            local = rows.logits(hidden_states)
            if self._caovan_tp > 1:
                from vllm.distributed import tensor_model_parallel_all_gather

                local = tensor_model_parallel_all_gather(local, dim=-1)
            return local[..., :self._caovan_hot.vocab_size]

        def get_top_tokens(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if self._caovan_current_rows() is None:
                return super().get_top_tokens(hidden_states, *args, **kwargs)
            return self.compute_logits(hidden_states).argmax(dim=-1)

        def _caovan_current_rows(self) -> HotRows | None:
            if self._caovan_hot is None or self._caovan_refused:
                return None
            if self._caovan_rows is None or not self._caovan_rows.copied_from(self.lm_head.weight):
                self._caovan_take_rows()  # the drafter's own head, loaded after __init__: its rows at first use
            return self._caovan_rows

        def _caovan_take_rows(self) -> None:
            hot = self._caovan_hot
            head = self.lm_head
            why_not = _unusable_head(head, getattr(self, "logits_processor", None))
            if why_not:
                self._caovan_refused = True
                _announce(DraftVocabVerdict(False, 0, hot.vocab_size, f"{why_not}: the drafter scores every id"))
                return
            shard = head.shard_indices
            self._caovan_rows = None  # the old copy goes before the new one is made
            self._caovan_rows = HotRows(head.weight, hot.ids, shard.org_vocab_start_index,
                                        shard.org_vocab_end_index)
            self._caovan_tp = int(getattr(head, "tp_size", 1) or 1)
            _announce(DraftVocabVerdict(True, len(hot.ids), hot.vocab_size, _detail(hot, self._caovan_rows)))

    HotVocabDrafter.__name__ = HotVocabDrafter.__qualname__ = base.__name__
    HotVocabDrafter.__module__ = __name__
    HotVocabDrafter.__doc__ = f"vLLM's {base.__name__} with DraftVocab (caovan_kernels.draft_vocab)."
    return HotVocabDrafter


def hot_vocab_for(vllm_config: Any) -> HotVocab | None:
    """The hot vocabulary this launch asks for (None: caovan_draft_vocab unset, or the plugin switched off)."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    if "caovan" in extra and not extra["caovan"]:  # the plugin switched off: vLLM's drafter as it is
        return None
    spec = DraftVocabSpec.parse(extra.get(SETTING))
    if spec is None:
        return None
    model_config = vllm_config.model_config
    vocab = int(model_config.get_vocab_size())
    always: set[int] = set()
    for source in {model_config.model, getattr(model_config, "tokenizer", None) or model_config.model}:
        found = _local_dir(source)
        if found is not None:
            always |= control_token_ids(found)
    return build(spec, vocab, always)


def _unusable_head(head: Any, logits_processor: Any) -> str:
    """Why this lm_head cannot be read by rows ("" when it can)."""
    method = type(getattr(head, "quant_method", None)).__name__
    if method != "UnquantizedEmbeddingMethod" or not isinstance(getattr(head, "weight", None), torch.Tensor):
        return f"the lm_head is not a plain weight matrix ({method})"
    if not hasattr(head, "shard_indices"):
        return "the lm_head is not vLLM's vocabulary-parallel head"
    if logits_processor is not None and (getattr(logits_processor, "soft_cap", None)
                                         or getattr(logits_processor, "scale", 1.0) != 1.0):
        return "the model scales or caps its logits"
    return ""


def _detail(hot: HotVocab, rows: HotRows) -> str:
    """What this rank reads: its own shard's hot rows (with tensor parallelism the low ids all sit on the first
    rank, which then sets the pace)."""
    extra = len(hot.ids) - hot.ranked
    read = rows.index.numel()
    fewer = f"{rows.width / read:.1f}x fewer" if read else "all its ids are cold"
    return (f"{hot.ranked} ids by {hot.source} + {extra} control tokens; this rank reads {read} of its {rows.width} "
            f"lm_head rows per draft pass ({fewer}), {rows.bytes / 2**20:.1f} MiB copied")


def _announce(verdict: DraftVocabVerdict) -> None:
    log(verdict.line())


def _local_dir(model: str | None) -> Path | None:
    """The model's files: its path, or its copy in the Hugging Face cache (no download); None when neither."""
    if model and Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(model), local_files_only=True))
    except (OSError, ValueError):  # not in the cache, or not a repository id
        return None
