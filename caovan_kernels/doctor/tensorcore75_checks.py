"""TensorCore75: does the hook put a fp16 dot on Turing tensor cores here, and will it be on for this machine?"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from caovan_kernels.profile.gpus import Inventory
from caovan_kernels.vllm.settings import EnginePluginSettings

from .report import Check, CheckStatus

GROUP = "tensorcore75"
# fp16 products are exact in fp32; 32-term sums of N(0,1) products differ from torch's by rounding order only.
MAX_ERROR = 1e-3


def _probe(action: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "caovan_kernels.doctor.tensorcore75_probe", action],
                          capture_output=True, text=True, timeout=300, env=env)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1][:300])
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_compile() -> Check:
    name = "TensorCore75 on the sm_75 compile path"
    try:
        out = _probe("compile")
    except Exception as exc:  # noqa: BLE001 - a compiler failure is the finding
        return Check(GROUP, name, CheckStatus.FAIL, f"the probe dot did not compile for sm_75 through the hook: {exc}",
                     "run `caovan doctor --json` and report it; caovan_turing_mma=off restores Triton's own lowering")
    if not out["active"]:
        return Check(GROUP, name, CheckStatus.SKIP, out["detail"], "install a Triton of the tested set (the one your "
                     "vLLM pins is usually in it)")
    turing = [m for m in out["mma"] if ".m16n8k8." in m]
    if not turing:
        return Check(GROUP, name, CheckStatus.FAIL,
                     f"the hook ran but the PTX holds no m16n8k8 ({out['mma'] or 'no mma'})",
                     "report it with `caovan doctor --json`; caovan_turing_mma=off restores Triton's own lowering")
    return Check(GROUP, name, CheckStatus.PASS, f"Triton {out['triton']}: {turing[0]}, accepted by ptxas for sm_75")


def check_run(inventory: Inventory) -> Check:
    name = "TensorCore75 probe on the GPU"
    if not inventory.gpus:
        return Check(GROUP, name, CheckStatus.SKIP, "no GPU here: the probe was compiled, not run",
                     "run the doctor on the GPU machine to check the numbers")
    try:
        out = _probe("run")
    except Exception as exc:  # noqa: BLE001
        return Check(GROUP, name, CheckStatus.FAIL, f"the probe failed on the GPU: {exc}",
                     "set caovan_turing_mma=off (Triton's own lowering) and report it with `caovan doctor --json`")
    if not out["ran"]:
        return Check(GROUP, name, CheckStatus.SKIP, out["detail"], "see the checks above")
    error = out["max_abs_error"]
    detail = f"{out['path']} on {out['gpu']}: max |error| vs torch {error:.2e} (retargeted: {out['retargeted']})"
    if not error <= MAX_ERROR or out["retargeted"] != 1:
        return Check(GROUP, name, CheckStatus.FAIL, detail, "set caovan_turing_mma=off and report it")
    return Check(GROUP, name, CheckStatus.PASS, detail)


def check_mode(inventory: Inventory) -> Check:
    name = "TensorCore75 setting"
    mode = EnginePluginSettings.from_env().turing_mma
    turing = [g for g in inventory.gpus if g.capability == (7, 5)]
    if not turing:
        where = "no sm_75 GPU here" if inventory.gpus else "no GPU here"
        return Check(GROUP, name, CheckStatus.PASS, f"caovan_turing_mma={mode}; {where}, so auto leaves Triton alone")
    if mode == "off":
        return Check(GROUP, name, CheckStatus.WARN,
                     f"{turing[0].describe()}: Triton 3.4+ lowers every tl.dot to FMA on sm_75 and TensorCore75 is off "
                     "(CAOVAN_TURING_MMA=off)",
                     "unset CAOVAN_TURING_MMA (or set caovan_turing_mma=auto) to put fp16 dots on tensor cores")
    return Check(GROUP, name, CheckStatus.PASS, f"caovan_turing_mma={mode}: fp16 dots go to tensor cores in every vLLM "
                 f"process on {turing[0].describe()}")


def check_tensorcore75(inventory: Inventory) -> list[Check]:
    return [check_compile(), check_run(inventory), check_mode(inventory)]
