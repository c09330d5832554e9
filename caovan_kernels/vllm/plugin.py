"""Entry point vLLM calls (with no arguments) in each of its processes."""

from __future__ import annotations

from .markers import BANNER, emit_once, log
from .settings import PluginSettings

_registered = False


def register() -> None:
    """Print the banner and, when the GDN seam exists, put our GDN layer class in vLLM's place.

    Whether GDNCore then runs is decided per layer when vLLM builds the model (the launch's --additional-config is
    readable only there); a vLLM without a GDN layer loads this without effect."""
    global _registered
    emit_once(BANNER)
    if _registered:
        return
    settings = PluginSettings.from_env()
    if not settings.enabled:
        log("[Caovan GDNCore] plugin disabled by CAOVAN_ENABLE=0: stock vLLM")
        return
    from .layer import announce_seam, make_layer_class
    from .seams import check_seams, select_seam

    selected = select_seam()
    if selected is None:
        checks = "; ".join(f"{c.name}: {c.status} ({c.reason})" for c in check_seams())
        if settings.require_turbo3:
            raise RuntimeError(
                f"Caovan: CAOVAN_REQUIRE_TURBO3=1 but this vLLM offers no GDN seam GDNCore can take ({checks}). "
                "Install a vLLM with the PluggableLayer GDN layer (0.21 or newer), or unset CAOVAN_REQUIRE_TURBO3."
            )
        log(f"[Caovan GDNCore] no GDN seam found, stock kernels ({checks})")
        return
    seam, base = selected
    base.register_oot(make_layer_class(base, seam.cpu_path), name=base.__name__)
    announce_seam(seam.name)
    _registered = True
