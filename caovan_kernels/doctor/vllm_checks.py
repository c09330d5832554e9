"""vLLM itself, the GDN interface check of the plugin, where caovan_mode=auto runs GDNCore, and the GDNCore
self-test on each device.

The seam detection (caovan_kernels.vllm.seams.check_seams) and the self-test (caovan_kernels.gdn.selftest.run) live
with the plugin and the kernels; this module only calls them and reports."""

from __future__ import annotations

import importlib
import importlib.util

from caovan_kernels.profile.gpus import Inventory
from caovan_kernels.profile.vllm_abilities import INSTALL_VLLM, detect_vllm
from caovan_kernels.tensorcore75 import TESTED_TRITON, TURING
from caovan_kernels.tensorcore75.seam import version_tuple
from caovan_kernels.vllm.attention_seam import check_attention_seam
from caovan_kernels.vllm.auto_choice import auto_choice
from caovan_kernels.vllm.settings import EnginePluginSettings

from .report import Check, CheckStatus

SEAMS_MODULE = "caovan_kernels.vllm.seams"
SELFTEST_MODULE = "caovan_kernels.gdn.selftest"


def check_vllm() -> list[Check]:
    abilities = detect_vllm()
    if abilities.version is None:
        return [Check("vllm", "vLLM", CheckStatus.FAIL, abilities.source,
                      f"install vLLM: {INSTALL_VLLM}")]
    return [Check("vllm", "vLLM", CheckStatus.PASS,
                  f"{abilities.distribution or 'vllm'} {abilities.version}; flags from the {abilities.source}")]


def _optional_module(name: str):
    """The module, or None when it is not installed; an import that fails inside it is re-raised."""
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(name)


def check_gdn_seams() -> list[Check]:
    try:
        seams = _optional_module(SEAMS_MODULE)
    except Exception as exc:  # noqa: BLE001 - a broken plugin is the finding
        return [Check("gdn-seams", "GDN interface", CheckStatus.FAIL, f"{SEAMS_MODULE} fails to import: {exc}",
                      "reinstall Caovan (pip install --force-reinstall caovan)")]
    if seams is None:
        return [Check("gdn-seams", "GDN interface", CheckStatus.SKIP, "plugin seam detection not installed",
                      f"install a Caovan release that ships {SEAMS_MODULE}")]
    results = seams.check_seams()
    statuses = [CheckStatus(str(getattr(r.status, "value", r.status))) for r in results]
    taken = next((r.name for r, s in zip(results, statuses) if s is CheckStatus.PASS), None)
    # A candidate layout this vLLM lacks needs no action when another seam is taken.
    other = f"nothing to do: seam {taken} applies" if taken else "see GDN interface below"
    checks = [Check("gdn-seams", f"GDN seam {r.name}", s, str(r.reason), "" if s is CheckStatus.PASS else other)
              for r, s in zip(results, statuses)]
    if taken:
        checks.append(Check("gdn-seams", "GDN interface", CheckStatus.PASS,
                            "GDNCore can take over GDN prefill and decode in this vLLM"))
    else:
        checks.append(Check("gdn-seams", "GDN interface", CheckStatus.WARN,
                            "no seam of this vLLM can be taken: the engine runs vLLM's stock GDN kernels",
                            "use a vLLM whose GDN layer Caovan knows (see the seams above); with "
                            "CAOVAN_REQUIRE_TURBO3=1 the engine refuses to start instead"))
    return checks


def check_split_kv_attention() -> list[Check]:
    """Whether the MTP verify's attention can go through the split-KV kernel: vLLM's backend registry takes our
    Triton attention backend in TRITON_ATTN's place (caovan_kernels.vllm.attention_seam)."""
    name = "split-KV verify attention"
    settings = EnginePluginSettings.from_env()
    if settings.split_kv == "off":
        return [Check("attention-seam", name, CheckStatus.PASS, "CAOVAN_SPLIT_KV=off: vLLM's Triton attention")]
    seam = check_attention_seam()
    if seam.status == "PASS":
        return [Check("attention-seam", name, CheckStatus.PASS,
                      f"{seam.reason}: where vLLM runs Triton attention (a Turing GPU's only backend), the MTP verify "
                      "of small batches walks the context split across the GPU")]
    return [Check("attention-seam", name, CheckStatus.WARN, f"not available: {seam.reason}",
                  "the engine verifies MTP drafts with vLLM's own Triton attention, whose decode slows with the "
                  "context; use a vLLM whose attention backend registry Caovan knows (0.21 or newer)")]


def _devices(inventory: Inventory) -> list[str]:
    devices = ["cpu"]
    if inventory.gpus:
        try:
            import torch

            devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
        except ImportError:
            pass
    return devices


def check_gdn_selftest(inventory: Inventory) -> list[Check]:
    devices = _devices(inventory)
    try:
        selftest = importlib.import_module(SELFTEST_MODULE)
    except Exception as exc:  # noqa: BLE001
        return [Check("gdn-selftest", "GDNCore self-test", CheckStatus.FAIL,
                      f"{SELFTEST_MODULE} fails to import: {exc}",
                      "reinstall Caovan (pip install --force-reinstall caovan)")]
    checks = []
    for device in devices:
        try:
            ok, detail = selftest.run(device)
        except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failed self-test
            ok, detail = False, f"crashed: {type(exc).__name__}: {exc}"
        checks.append(Check("gdn-selftest", f"GDNCore self-test on {device}",
                            CheckStatus.PASS if ok else CheckStatus.FAIL, detail,
                            "" if ok else "run caovan_kernels.gdn.selftest on this device and report the output with "
                                          "`caovan doctor --json`"))
    return checks


def check_gdn_auto(inventory: Inventory) -> list[Check]:
    """What caovan_mode=auto picks on each kind of GPU here (vllm/auto_choice.py: GDNCore only where it measured
    faster than vLLM's kernels)."""
    import triton

    name = "GDNCore in caovan_mode=auto"
    settings = EnginePluginSettings.from_env()
    if settings.mode != "auto":
        where = "everywhere" if settings.mode == "force" else "nowhere (stock vLLM kernels)"
        return [Check("gdn-auto", name, CheckStatus.PASS, f"CAOVAN_MODE={settings.mode}: GDNCore runs {where}")]
    if not inventory.gpus:
        return [Check("gdn-auto", name, CheckStatus.PASS,
                      "no CUDA GPU: vLLM's CPU kernels (caovan_mode=force runs GDNCore through Triton's interpreter)")]
    triton_release = version_tuple(triton.__version__)
    checks = []
    for sm in sorted({gpu.sm for gpu in inventory.gpus}):
        turing_mma = sm == TURING and settings.turing_mma != "off" and triton_release in TESTED_TRITON
        ours, why = auto_choice(sm, turing_mma, triton_release)
        checks.append(Check("gdn-auto", f"{name} on sm_{sm}", CheckStatus.PASS, why,
                            "" if ours else "caovan_mode=force runs GDNCore anyway (for comparisons)"))
    return checks
