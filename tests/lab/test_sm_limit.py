"""The SM limit of the Turing proxy (lab/sm_limit.py) without a GPU: its probe kernel compiles for sm_90 and sm_75
and reads the SM id, and without a GPU the limit says why it cannot hold. On a GPU, `limit()` checks itself with the
probe (eager and from a CUDA graph) before any timing uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab import sm_limit

ROOT = Path(__file__).resolve().parents[2]

COMPILE = """
import json, subprocess, sys, tempfile
from pathlib import Path
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from lab.sm75_fit import ptxas_path
from lab.sm_limit import _sm_probe_kernel
found = {}
for arch, gpu in ((90, "sm_90a"), (75, "sm_75")):
    src = ASTSource(_sm_probe_kernel, {"out_ptr": "*i32", "spin": "i32"}, constexprs={})
    ptx = triton.compile(src, target=GPUTarget("cuda", arch, 32)).asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        done = subprocess.run([ptxas_path(), "--gpu-name", gpu, str(Path(tmp) / "k.ptx"), "-o",
                               str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    found[gpu] = {"smid": "%smid" in ptx, "ptxas": done.returncode, "error": done.stderr[-500:]}
print(json.dumps(found))
"""


def test_the_probe_reads_the_sm_id_and_assembles_for_hopper_and_turing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiles for real targets
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for gpu, result in found.items():
        assert result["smid"] and result["ptxas"] == 0, (gpu, result)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the limit runs its probe instead")
def test_without_a_gpu_the_limit_says_why() -> None:
    with pytest.raises(sm_limit.SmLimitError, match="no CUDA GPU here"):
        sm_limit.limit(sm_limit.RTX_2080_TI_SMS)
