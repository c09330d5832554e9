"""Triton: its version, whether `tl.dot` becomes tensor-core (mma) instructions for each GPU's architecture, and
the ptxas it assembles with. The tensor-core check compiles a tiny kernel for the target; no GPU is needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import lru_cache

from caovan_kernels.profile.gpus import Inventory

from .report import Check, CheckStatus

TARGET_SM = 75  # Caovan's target, checked when this machine has no GPU
LAST_MMA_TRITON_FOR_SM75 = "3.2"


def _triton():
    try:
        import triton

        return triton
    except ImportError:
        return None


def check_triton_version() -> list[Check]:
    triton = _triton()
    if triton is None:
        return [Check("triton", "Triton", CheckStatus.FAIL, "not importable",
                      "install the Triton your vLLM pins (it comes with the CUDA build of vLLM; pip install triton)")]
    return [Check("triton", "Triton", CheckStatus.PASS, f"{triton.__version__} at {os.path.dirname(triton.__file__)}")]


@lru_cache(maxsize=None)
def dot_emits_mma(sm: int) -> tuple[bool, str]:
    """Compile a 32x32 fp16 tl.dot for sm and look for mma in its PTX; returns (found, the first mma line or a
    note). The compile runs in a child process without TRITON_INTERPRET (see dot_probe)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "caovan_kernels.doctor.dot_probe", str(sm)], capture_output=True,
                         text=True, timeout=300, env=env)
    if run.returncode != 0:
        raise RuntimeError((run.stderr.strip().splitlines() or ["no output"])[-1])
    mma = [line.strip() for line in run.stdout.splitlines() if "mma" in line]
    return (True, mma[0].split("{")[0].strip()) if mma else (False, "no mma instruction in the PTX")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def check_tensor_cores(inventory: Inventory) -> list[Check]:
    triton = _triton()
    if triton is None:
        return [Check("triton", "tensor cores", CheckStatus.SKIP, "Triton not importable", "install Triton first")]
    archs = sorted({g.sm for g in inventory.gpus}) or [TARGET_SM]
    checks = []
    for sm in archs:
        name = f"tl.dot on sm_{sm}" + ("" if inventory.gpus else " (Caovan's target; no GPU here)")
        try:
            found, line = dot_emits_mma(sm)
        except Exception as exc:  # noqa: BLE001 - a compiler failure is the finding
            checks.append(Check("triton", name, CheckStatus.FAIL,
                                f"Triton {triton.__version__} cannot compile a tl.dot for sm_{sm}: "
                                f"{str(exc).splitlines()[0][:200]}",
                                "reinstall the Triton your vLLM pins; check ptxas below"))
            continue
        if found:
            checks.append(Check("triton", name, CheckStatus.PASS, f"Triton {triton.__version__} emits tensor-core "
                                f"instructions ({line})"))
        elif sm == 75 and _version_tuple(triton.__version__) >= (3, 4):
            checks.append(Check("triton", name, CheckStatus.WARN,
                                f"tl.dot lowers to FMA on sm_75 (no mma) with Triton 3.4+ (found "
                                f"{triton.__version__}): without TensorCore75 matrix products run on CUDA cores",
                                "TensorCore75 puts fp16 dots back on tensor cores (its checks below); the last "
                                f"Triton to do it itself was {LAST_MMA_TRITON_FOR_SM75}"))
        else:
            checks.append(Check("triton", name, CheckStatus.WARN, f"Triton {triton.__version__} emits no mma for "
                                f"sm_{sm}: tl.dot runs on CUDA cores", "use the Triton release your vLLM pins"))
    return checks


def _ptxas_path() -> tuple[str | None, str]:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        how = "TRITON_PTXAS_PATH" if os.environ.get("TRITON_PTXAS_PATH") else "bundled with Triton"
        return get_ptxas(80).path, how
    except Exception:  # noqa: BLE001 - older Tritons lack get_ptxas; fall back to the documented locations
        pass
    if os.environ.get("TRITON_PTXAS_PATH"):
        return os.environ["TRITON_PTXAS_PATH"], "TRITON_PTXAS_PATH"
    triton = _triton()
    if triton is None:
        return None, "Triton not importable"
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return (bundled, "Triton's bundled ptxas") if os.path.exists(bundled) else (None, "no ptxas found")


def check_ptxas() -> list[Check]:
    path, source = _ptxas_path()
    if path is None:
        return [Check("ptxas", "ptxas", CheckStatus.FAIL, source,
                      "set TRITON_PTXAS_PATH to a CUDA 12+ ptxas, or reinstall Triton (it bundles one)")]
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return [Check("ptxas", "ptxas", CheckStatus.FAIL, f"{path} ({source}) does not run: {exc}",
                      "point TRITON_PTXAS_PATH at a working ptxas or reinstall Triton")]
    release = re.search(r"release ([\d.]+)", out)
    return [Check("ptxas", "ptxas", CheckStatus.PASS,
                  f"{path} ({source}), CUDA {release.group(1) if release else 'version unknown'}")]
