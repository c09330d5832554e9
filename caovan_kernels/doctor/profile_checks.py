"""AutoSpec and AutoMem as the launch profile decides them for a given model on this machine."""

from __future__ import annotations

from pathlib import Path

from caovan_kernels.errors import ModelConfigError, ProfileError
from caovan_kernels.profile.gpus import Inventory
from caovan_kernels.profile.planner import build_profile

from .report import Check, CheckStatus

REPORTED = ("AutoSpec", "AutoMem", "Elastic-KV")


def check_profile(model: Path | None, inventory: Inventory) -> list[Check]:
    if model is None:
        return [Check("profile", name, CheckStatus.SKIP, "no model given", "run `caovan doctor --model MODEL_DIR`")
                for name in ("AutoSpec", "AutoMem")]
    try:
        profile = build_profile(model, [], inventory)
    except (ModelConfigError, ProfileError) as exc:
        return [Check("profile", "launch profile", CheckStatus.FAIL, str(exc),
                      "fix the model directory, or pin the launch flags yourself (caovan profile shows them)")]
    checks = []
    for name in REPORTED:
        decision = next((d for d in profile.decisions if d.name == name), None)
        if decision is not None:
            checks.append(Check("profile", name, CheckStatus.PASS, f"{decision.value}: {decision.reason}"))
        elif name == "AutoMem" and inventory.cpu_only:
            checks.append(Check("profile", name, CheckStatus.SKIP, "no GPU: vLLM's CPU build sizes its KV cache from "
                                "VLLM_CPU_KVCACHE_SPACE", "set VLLM_CPU_KVCACHE_SPACE (GiB) for more KV cache"))
    return checks
