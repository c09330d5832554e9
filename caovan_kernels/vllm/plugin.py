"""Entry point vLLM calls (with no arguments) in each of its processes."""

from __future__ import annotations

from caovan_kernels import contract, tensorcore75
from caovan_kernels.errors import Turbo3Unavailable
from caovan_kernels.logger import log
from caovan_kernels.turing import proxy

from .attention_seam import register_attention_backend
from .markers import BANNER, emit_once
from .seams import check_seams, select_seam
from .settings import EnginePluginSettings

_registered = False


def register() -> None:
    """Print the banner, settle TensorCore75 (and the Turing proxy) for this process, register the MTP drafters
    that DraftVocab can narrow and the split-KV attention backend (where vLLM's registry takes it) and, when the GDN
    seam exists, put our GDN layer class in vLLM's place.

    Whether GDNCore then runs is decided per layer when vLLM builds the model (the launch's --additional-config is
    readable only there); a vLLM without a GDN layer loads this without effect."""
    global _registered
    emit_once(BANNER)
    if _registered:
        return
    _registered = True
    settings = EnginePluginSettings.from_env()
    if not settings.enabled:
        log("[Caovan GDNCore] plugin disabled by CAOVAN_ENABLE=0: stock vLLM")
        return
    _turing_code_path(settings)
    from caovan_kernels.draft_vocab import drafters  # imports torch and vLLM, as the GDN layer below

    drafters.register()
    _split_kv(settings)
    from .layer import (  # imports torch and vLLM: only once the plugin is enabled
        announce_seam,
        make_layer_class,
    )

    selected = select_seam()
    if selected is None:
        checks = "; ".join(f"{c.name}: {c.status} ({c.reason})" for c in check_seams())
        if settings.require_turbo3:
            raise Turbo3Unavailable(
                f"Caovan: CAOVAN_REQUIRE_TURBO3=1 but this vLLM offers no GDN seam GDNCore can take ({checks}). "
                "Install a vLLM with the PluggableLayer GDN layer (0.21 or newer), or unset CAOVAN_REQUIRE_TURBO3."
            )
        log(f"[Caovan GDNCore] no GDN seam found, stock kernels ({checks})")
        return
    seam, base = selected
    base.register_oot(make_layer_class(base, seam.cpu_path), name=base.__name__)
    announce_seam(seam.name)


def _split_kv(settings: EnginePluginSettings) -> None:
    """The MTP verify's attention: our Triton backend in TRITON_ATTN's place, unless CAOVAN_SPLIT_KV=off (an engine's
    builder reads caovan_split_kv from --additional-config too, and keeps vLLM's path when it says off)."""
    if settings.split_kv == "off":
        emit_once(contract.SplitKvVerdict(False, "CAOVAN_SPLIT_KV=off: vLLM's Triton attention throughout").line())
        return
    check = register_attention_backend()
    if check.status != "PASS":
        emit_once(contract.SplitKvVerdict(False, f"no attention seam: {check.reason}").line())


def _turing_code_path(settings: EnginePluginSettings) -> None:
    """The Turing proxy (when CAOVAN_TURING_PROXY asks for it) and TensorCore75, before any kernel compiles."""
    line = proxy.enable_from_env()
    if line:
        log(line)
    tensorcore75.process().activate(settings.turing_mma)
