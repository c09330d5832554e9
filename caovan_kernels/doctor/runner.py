"""Run the doctor's checks in order and collect the report; a check that crashes is reported, never fatal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caovan_kernels import __version__
from caovan_kernels.profile.gpus import Inventory, detect_gpus

from .environment_checks import check_cache_dirs, check_stale_flashqla
from .platform_checks import check_gpus, check_python, check_torch
from .plugin_copy import check_plugin_copy
from .profile_checks import check_profile
from .report import Check, CheckStatus, Report
from .tensorcore75_checks import check_tensorcore75
from .triton_checks import check_ptxas, check_tensor_cores, check_triton_version
from .vllm_checks import check_gdn_auto, check_gdn_seams, check_gdn_selftest, check_split_kv_attention, check_vllm


@dataclass(frozen=True)
class DoctorContext:
    inventory: Inventory
    model: Path | None


CHECKS: dict[str, Callable[[DoctorContext], list[Check]]] = {
    "python": lambda ctx: check_python(),
    "torch": lambda ctx: check_torch(ctx.inventory),
    "gpus": lambda ctx: check_gpus(ctx.inventory),
    "triton": lambda ctx: check_triton_version() + check_tensor_cores(ctx.inventory),
    "ptxas": lambda ctx: check_ptxas(),
    "tensorcore75": lambda ctx: check_tensorcore75(ctx.inventory),
    "vllm": lambda ctx: check_vllm(),
    "gdn-seams": lambda ctx: check_gdn_seams(),
    "gdn-auto": lambda ctx: check_gdn_auto(ctx.inventory),
    "gdn-selftest": lambda ctx: check_gdn_selftest(ctx.inventory),
    "attention-seam": lambda ctx: check_split_kv_attention(),
    "profile": lambda ctx: check_profile(ctx.model, ctx.inventory),
    "cache-dirs": lambda ctx: check_cache_dirs(),
    "flashqla-env": lambda ctx: check_stale_flashqla(),
    "plugin-copy": lambda ctx: check_plugin_copy(),
}


def run_doctor(model: Path | None = None, only: list[str] | None = None,
               inventory: Inventory | None = None) -> Report:
    unknown = sorted(set(only or ()) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    ctx = DoctorContext(inventory if inventory is not None else detect_gpus(), model)
    report = Report(__version__)
    for group, run in CHECKS.items():
        if only and group not in only:
            continue
        try:
            report.checks += run(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            report.checks.append(Check(group, group, CheckStatus.FAIL,
                                       f"the check crashed: {type(exc).__name__}: {exc}",
                                       "report this with the output of `caovan doctor --json`"))
    return report
