"""GDNCore's self-test: the prefill and decode kernels against the float64 reference on one device, in seconds.

    python -m caovan_kernels.gdn.selftest DEVICE [--seed N]     (prints one JSON line)

`run(device)` runs that in a child process, because Triton fixes interpreted-or-compiled when it is imported: on
a CPU the kernels run through Triton's interpreter (TRITON_INTERPRET=1), on a GPU compiled for it. A tiny shape
(two heads, dims 32, 45 prefill tokens with an initial state, one decode token) keeps it fast; the tolerances are
the kernel tests' (caovan_kernels/gdn/accuracy.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

BACKEND_LINES = ("GDNCore backend=caovan_gdncore", "external_gdn_kernel_dependency=none", "tilelang=not required",
                 "runtime_cuda_extension=not required")


def measure(device: str, seed: int) -> dict:
    # imported in the child only: importing the kernels fixes interpreted-or-compiled for the whole process
    import torch

    from caovan_kernels.gdn import (
        chunk_gated_delta_rule,
        fused_recurrent_gated_delta_rule,
        reference,
    )
    from caovan_kernels.gdn.accuracy import (
        CHUNK_TOL,
        DECODE_OUT_TOL,
        DECODE_STATE_TOL,
        rel_err,
    )

    dtype, (T, H, HV, K, V) = torch.float16, (45, 2, 4, 32, 32)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64).to(device, dtype)
    k = reference.unit_keys((1, T, H, K), gen).to(device, dtype)
    v = torch.randn(1, T, HV, V, generator=gen, dtype=torch.float64).to(device, dtype)
    g = reference.random_gates((1, T, HV), "mild", gen).to(device, torch.float32)
    beta = torch.rand(1, T, HV, generator=gen, dtype=torch.float64).to(device, dtype)
    h0 = (0.1 * torch.randn(1, HV, K, V, generator=gen, dtype=torch.float64)).to(device, torch.float32)
    started = time.perf_counter()
    o, ht = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    ref_o, ref_h, _ = reference.recurrent_gated_delta_rule(q[0], k[0], v[0], g[0], beta[0], K**-0.5, h0[0])
    # one decode step from the prefill's final state
    od, hd = fused_recurrent_gated_delta_rule(q[:, -1:], k[:, -1:], v[:, -1:], g[:, -1:], beta=beta[:, -1:],
                                              initial_state=ref_h[None].float(), output_final_state=True)
    ref_od, ref_hd, _ = reference.recurrent_gated_delta_rule(q[0, -1:], k[0, -1:], v[0, -1:], g[0, -1:],
                                                             beta[0, -1:], K**-0.5, ref_h)
    errors = {"prefill out": (rel_err(o[0], ref_o), CHUNK_TOL[dtype]),
              "prefill state": (rel_err(ht[0], ref_h), CHUNK_TOL[dtype]),
              "decode out": (rel_err(od[0], ref_od), DECODE_OUT_TOL[dtype]),
              "decode state": (rel_err(hd[0], ref_hd), DECODE_STATE_TOL)}
    return {"seed": seed, "seconds": time.perf_counter() - started, "errors": errors}


def run(device: str) -> tuple[bool, str]:
    """Self-test on `device` ("cpu", "cuda:0", ...): (passed, one line with every error against its tolerance)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    seed = int.from_bytes(os.urandom(3), "little")
    done = subprocess.run([sys.executable, "-m", "caovan_kernels.gdn.selftest", device, "--seed", str(seed)],
                          capture_output=True, text=True, timeout=300, env=env)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1][:300])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    errors = result["errors"]
    ok = all(err <= tol for err, tol in errors.values())
    found = ", ".join(f"{name} {err:.1e} (tol {tol:g})" for name, (err, tol) in errors.items())
    where = "Triton interpreter" if device == "cpu" else device
    return ok, (f"{'PASS' if ok else 'FAIL'} on {where} in {result['seconds']:.1f} s, relative L2 error vs the "
                f"float64 reference: {found}; seed {seed}; {', '.join(BACKEND_LINES)}")


if __name__ == "__main__":
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    print(json.dumps(measure(sys.argv[1], seed)))
