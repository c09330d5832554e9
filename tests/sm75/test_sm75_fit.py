"""Every GDN kernel configuration the wrappers launch on sm_75 compiles for it within Turing's limits.

Compiled with triton.compile(target=GPUTarget("cuda", 75, 32)) and measured with the ptxas -v bundled with
Triton: shared memory within 64 KB, no spill stores or loads, no bf16 instruction in the fp16 PTX, mma.sync
m16n8k8 in the prefill's Turing MMA form (compiled through TensorCore75's hook) and none in the FMA form. The
table (kernel, config, shared memory, registers, mma) is printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_launch_config_fits_sm75() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "lab.sm75_fit", "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900,
    )  # fmt: skip
    assert done.stdout.strip(), f"the fitness check printed nothing:\n{done.stderr[-3000:]}"
    fits = json.loads(done.stdout)
    print(f"\n{'kernel':<20} {'config':<46} {'shared B':>9} {'regs':>5} {'spill B':>8} {'bf16':>5} {'mma':>5} per SM")
    for f in fits:
        print(f"{f['kernel']:<20} {f['config']:<46} {f['shared_bytes']:>9} {f['registers']:>5} {f['spill_bytes']:>8} "
              f"{str(f['bf16_in_ptx']):>5} {str(f['mma_in_ptx']):>5} {f['programs_per_sm']}")
    kernels = {f["kernel"] for f in fits}
    assert kernels == {"chunk_wy", "chunk_state_output", "chunk_output", "recurrent", "l2norm_scale", "split_kv_segment",
                       "split_kv_merge"}
    # Qwen3.6's GDN head dim (128) takes the Turing MMA form in all three prefill kernels
    turing = {f["kernel"] for f in fits if f["config"].startswith("turing_mma K=V=128 ")}
    assert turing == {"chunk_wy", "chunk_state_output", "chunk_output"}, turing
    # Decode keeps its state slice in registers from load to store; shared memory holds only the reductions'
    # partials (hundreds of bytes). A state-sized buffer there means Triton converted the state between two layouts,
    # through shared memory, on every kept token: it did so while the load sat under a branch.
    for f in (f for f in fits if f["kernel"] == "recurrent"):
        bk, bv = (int(re.search(rf"\b{name}=(\d+)", f["config"]).group(1)) for name in ("BK", "BV"))
        state_tile_bytes = bk * bv * 4
        assert f["shared_bytes"] <= state_tile_bytes // 4, f"the decode state goes through shared memory: {f}"
    # The split-KV verify at Qwen3.6's attention head dim takes m16n8k8 through TensorCore75 for every rows-per-program
    split_mma = {f["config"].split(" tile")[0] for f in fits if f["kernel"] == "split_kv_segment" and f["mma_in_ptx"]}
    assert split_mma == {"turing_mma D=256 rows=16", "turing_mma D=256 rows=32", "turing_mma D=256 rows=64",
                         "turing_mma D=128 rows=32"}, split_mma
    misfits = [f for f in fits if not f["fits"]]
    assert not misfits, f"configurations that do not fit sm_75: {misfits}"
