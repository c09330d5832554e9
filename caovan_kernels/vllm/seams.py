"""GDN interface check: find how the installed vLLM builds its GDN layers, by feature, not by version number."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class GdnLayerSeam:
    """One way vLLM builds its GDN layers, and what taking it over needs."""

    name: str
    module: str
    cls: str
    # Methods the takeover overrides or calls; all must exist for the seam to be usable.
    needs: tuple[str, ...]
    # Whether our forward_cpu path can run here (vLLM's CPU build, the 0.3x layer family).
    cpu_path: bool
    takeover: bool = True


@dataclass(frozen=True)
class SeamCheck:
    name: str
    status: str  # PASS or SKIP
    reason: str


SEAMS = (
    GdnLayerSeam("qwen_gdn_pluggable_layer", "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
                 "QwenGatedDeltaNetAttention",
                 ("register_oot", "_forward_core", "forward_cpu", "rearrange_mixed_qkv", "_output_projection"), True),
    GdnLayerSeam("gdn_pluggable_layer", "vllm.model_executor.layers.mamba.gdn_linear_attn", "GatedDeltaNetAttention",
                 ("register_oot", "_forward_core", "rearrange_mixed_qkv"), False),
    # Before the PluggableLayer seam, the kernels were module functions of the model file: taking them over would
    # mean monkeypatching module globals, which we do not do; it is reported so the doctor shows what it saw.
    GdnLayerSeam("qwen3_next_module_functions", "vllm.model_executor.models.qwen3_next", "Qwen3NextGatedDeltaNet",
                 ("forward",), False, takeover=False),
)


def _check(seam: GdnLayerSeam) -> tuple[SeamCheck, type | None]:
    try:
        module = importlib.import_module(seam.module)
    except Exception as exc:  # noqa: BLE001  (any import failure means: not this layout)
        return SeamCheck(seam.name, "SKIP", f"{seam.module} not importable ({type(exc).__name__})"), None
    cls = getattr(module, seam.cls, None)
    if not isinstance(cls, type):
        return SeamCheck(seam.name, "SKIP", f"{seam.module} has no class {seam.cls}"), None
    missing = [m for m in seam.needs if not hasattr(cls, m)]
    if missing:
        return SeamCheck(seam.name, "SKIP", f"{seam.cls} lacks {', '.join(missing)}"), None
    if not seam.takeover:
        return SeamCheck(seam.name, "SKIP", f"{seam.cls} found, but only monkeypatching could take it over"), None
    return SeamCheck(seam.name, "PASS", f"{seam.module}.{seam.cls} accepts register_oot"), cls


def check_seams() -> list[SeamCheck]:
    """Every known layout, PASS or SKIP with the reason (the doctor prints this)."""
    return [_check(seam)[0] for seam in SEAMS]


def select_seam() -> tuple[GdnLayerSeam, type] | None:
    """The cleanest seam this vLLM offers, and the layer class to subclass."""
    for seam in SEAMS:
        check, cls = _check(seam)
        if check.status == "PASS" and cls is not None:
            return seam, cls
    return None
