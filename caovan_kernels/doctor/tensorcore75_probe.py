"""`python -m caovan_kernels.doctor.tensorcore75_probe compile|run`: TensorCore75 on a small fp16 dot, as JSON.

compile: the probe dot compiled for sm_75 through the hook (no GPU needed): the mma instructions in its PTX; the
compile runs Triton's ptxas for sm_75, so a result means ptxas accepted it. run: the probe run on this machine's GPU
on the sm_75 code path (natively on a Turing GPU, through the Turing proxy elsewhere) against torch's matmul.
A separate process: the doctor may run where Triton is in interpreter mode, fixed at import, and the proxy changes
process-wide state.
"""

from __future__ import annotations

import json
import re
import sys

import triton
from triton.backends.compiler import GPUTarget

from caovan_kernels import tensorcore75
from caovan_kernels.doctor.dot_probe import BLOCK, dot_probe, probe_source
from caovan_kernels.turing import proxy

_MMA = re.compile(r"mma\.sync\.aligned\.\w+(?:\.\w+)*")


def compile_for_sm75() -> dict:
    status = tensorcore75.process().activate("force")
    if not status.active:
        return {"active": False, "detail": status.detail}
    ptx = triton.compile(probe_source(), target=GPUTarget("cuda", 75, 32)).asm["ptx"]
    return {"active": True, "triton": triton.__version__, "mma": sorted(set(_MMA.findall(ptx)))}


def run_on_gpu() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"ran": False, "detail": "no CUDA GPU visible to torch"}
    native = torch.cuda.get_device_capability() == (7, 5)
    name = torch.cuda.get_device_name()
    if not native:
        proxy.enable()
    status = tensorcore75.process().activate("auto")
    if not status.active:
        return {"ran": False, "detail": status.detail}
    gen = torch.Generator(device="cuda").manual_seed(75)
    a = torch.randn(BLOCK, BLOCK, device="cuda", generator=gen).half()
    b = torch.randn(BLOCK, BLOCK, device="cuda", generator=gen).half()
    c = torch.full((BLOCK, BLOCK), float("nan"), device="cuda")
    dot_probe[(1,)](a, b, c, BLOCK=BLOCK)
    torch.cuda.synchronize()
    error = (c - a.float() @ b.float()).abs().max().item()
    counts = tensorcore75.process().counts()
    return {"ran": True, "path": "sm_75 GPU" if native else "Turing proxy", "gpu": name, "max_abs_error": error,
            "retargeted": counts.retargeted}


if __name__ == "__main__":
    tensorcore75._process = tensorcore75.TensorCore75Hook(lambda line: None)  # stdout carries the JSON only
    print(json.dumps(compile_for_sm75() if sys.argv[1] == "compile" else run_on_gpu()))
