"""The TensorCore75 log lines (status once per process, kernel counts at 1, 10, 100, ... kernels)."""

from __future__ import annotations

PREFIX = "[Caovan TensorCore75]"


def status_line(active: bool, triton: str, mode: str, detail: str) -> str:
    return f"{PREFIX} {'ACTIVE' if active else 'off'} triton={triton} mode={mode}: {detail}"


def count_line(retargeted: int, kept: dict[str, int]) -> str:
    total = retargeted + sum(kept.values())
    reasons = " ".join(f"{reason}={n}" for reason, n in sorted(kept.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{PREFIX} kernels={total} retargeted={retargeted} kept={total - retargeted} ({reasons})"
