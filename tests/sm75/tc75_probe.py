"""Compile the probe kernels for sm_75 with TensorCore75 in several situations and print what happened as JSON.

    python tests/sm75/tc75_probe.py SCENARIO     (TRITON_INTERPRET unset; TRITON_CACHE_DIR set by the caller)

Needs only Triton and this repository (no torch, no GPU), so it also runs in venvs holding other Triton releases.
Scenarios: decisions, int8-off, before-hook, census, chain, fallback, ptx-rewritten, register-step-fails,
binary-unreadable, cache-write, cache-read, cache-off, cache-other-tag.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_kernels as pk  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from caovan_kernels import tensorcore75  # noqa: E402
from caovan_kernels.tensorcore75.pipeline import (  # noqa: E402
    LOCAL_BYTES_KEY,
    METADATA_KEY,
    REGISTERS_KEY,
)

SM75 = GPUTarget("cuda", 75, 32)
LOG: list[str] = []
_MMA = re.compile(r"mma\.sync\.aligned\.\w+(?:\.\w+)*")

# name -> (kernel, signature, constexprs)
PROBES = {
    "fp16": (pk.dot_kernel, {"a": "*fp16", "b": "*fp16", "c": "*fp32"}, {"BLOCK": 64, "ACC": tl.float32, "PRECISION": "tf32"}),
    "fp16_acc16": (pk.dot_kernel, {"a": "*fp16", "b": "*fp16", "c": "*fp16"}, {"BLOCK": 64, "ACC": tl.float16, "PRECISION": "tf32"}),
    "fp16_loop": (pk.looped_dot_kernel, {"a": "*fp16", "b": "*fp16", "c": "*fp32", "K": "i32"}, {"BLOCK": 64}),
    "int8": (pk.dot_kernel, {"a": "*i8", "b": "*i8", "c": "*i32"}, {"BLOCK": 64, "ACC": tl.int32, "PRECISION": "tf32"}),
    "bf16": (pk.dot_kernel, {"a": "*bf16", "b": "*bf16", "c": "*fp32"}, {"BLOCK": 64, "ACC": tl.float32, "PRECISION": "tf32"}),
    "fp32_tf32": (pk.dot_kernel, {"a": "*fp32", "b": "*fp32", "c": "*fp32"}, {"BLOCK": 32, "ACC": tl.float32, "PRECISION": "tf32"}),
    "fp32_ieee": (pk.dot_kernel, {"a": "*fp32", "b": "*fp32", "c": "*fp32"}, {"BLOCK": 32, "ACC": tl.float32, "PRECISION": "ieee"}),
    "mixed": (pk.mixed_dot_kernel, {"a": "*fp16", "b": "*fp16", "s": "*fp32", "c": "*fp32"}, {"BLOCK": 32}),
    "no_dot": (pk.no_dot_kernel, {"x": "*fp32", "y": "*fp32", "n": "i32"}, {"BLOCK": 128}),
}


def compile_probe(name: str, check_cubin: bool = False) -> dict:
    """What the compile of probe `name` gave; `check_cubin`: also whether Triton's own cubin stage, run on the PTX
    Triton stored, gives the cubin it stored."""
    fn, types, constexprs = PROBES[name]
    signature = {arg: ("constexpr" if arg in constexprs else types[arg]) for arg in fn.arg_names}
    hits: list[bool] = []
    previous = knobs.compilation.listener

    def listener(**kw: object) -> None:
        hits.append(bool(kw["cache_hit"]))
        if previous is not None:
            previous(**kw)

    knobs.compilation.listener = listener
    try:
        kernel = triton.compile(triton.compiler.ASTSource(fn, signature, constexprs=constexprs), target=SM75)
    except Exception as exc:  # noqa: BLE001 - Triton's own sm_75 lowering fails on some dots (int8): a finding
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    finally:
        knobs.compilation.listener = previous
    ptx = kernel.asm["ptx"]
    checked = {}
    if check_cubin:
        from triton.compiler.compiler import make_backend

        backend = make_backend(SM75)
        stock = backend.make_cubin(ptx, {}, backend.parse_options({}), SM75.arch)
        checked = {"cubin_from_stored_ptx": stock == kernel.asm["cubin"]}
    return {
        **checked,
        "decision": getattr(kernel.metadata, METADATA_KEY, None),
        "mma": sorted(set(_MMA.findall(ptx))),
        "ptx_body": ptx.split(".entry", 1)[-1],  # the kernel itself (the header names the PTX version)
        "cubin_sha256": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
        "registers": getattr(kernel.metadata, REGISTERS_KEY, None),
        "local_bytes": getattr(kernel.metadata, LOCAL_BYTES_KEY, None),
        "shared": kernel.metadata.shared,
        "cache_hit": hits[-1] if hits else None,
    }


def activate(mode: str) -> None:
    tensorcore75.process().activate(mode)


def scenario(name: str) -> dict:
    if name == "decisions":
        off = {p: compile_probe(p) for p in PROBES}
        activate("force")
        on = {p: compile_probe(p) for p in PROBES}
        return {"off": off, "on": on}
    if name == "int8-off":
        tensorcore75.RETARGET_INT8 = False
        activate("force")
        return compile_probe("int8")
    if name == "before-hook":
        first = compile_probe("fp16")
        activate("force")
        hooked = compile_probe("fp16")
        activate("off")
        again = compile_probe("fp16")
        return {"first": first, "hooked": hooked, "again": again}
    if name == "census":
        activate("force")
        for p in PROBES:
            compile_probe(p)
        compile_probe("fp16")  # a cache hit counts too (its decision comes back with the cached metadata)
        counts = tensorcore75.process().counts()
        return {"retargeted": counts.retargeted, "kept": dict(counts.kept)}
    if name == "chain":
        seen: list[str] = []

        def earlier_hook(backend, stages, options, language, capability):
            wrapped = stages["ttgir"]

            def ttgir(src, metadata):
                seen.append(f"{src.get_entry_func_name()}:{wrapped.__qualname__}")
                return wrapped(src, metadata)

            stages["ttgir"] = ttgir

        knobs.runtime.add_stages_inspection_hook = earlier_hook
        activate("force")
        result = compile_probe("fp16")
        activate("off")
        restored = knobs.runtime.add_stages_inspection_hook is earlier_hook
        return {"seen": seen, "decision": result["decision"], "mma": result["mma"], "restored": restored}
    if name == "fallback":
        from caovan_kernels.tensorcore75 import pipeline

        pipeline.TURING_SHARED_BYTES = 1024  # every retargeted kernel now "needs more than Turing has"
        activate("force")
        result = compile_probe("fp16")
        return {"decision": result["decision"], "mma": result["mma"], "log": LOG}
    if name == "ptx-rewritten":
        def later_stage(backend, stages, options, language, capability):
            ptx = stages["ptx"]

            def limit_registers(src, metadata):  # a PTX edit that changes the binary
                return re.sub(r"(?m)^(\.reqntid [^\n]*\n)", r"\1.maxnreg 40\n", ptx(src, metadata))

            stages["ptx"] = limit_registers

        activate("force")
        normal = compile_probe("fp16_loop", check_cubin=True)
        activate("off")
        knobs.runtime.add_stages_inspection_hook = later_stage  # installed before ours: it wraps our ptx stage
        activate("force")
        rewritten = compile_probe("fp16", check_cubin=True)
        return {"normal": normal, "rewritten": rewritten}
    if name in ("register-step-fails", "binary-unreadable"):
        from caovan_kernels.tensorcore75 import pipeline

        def broken(*args: object) -> None:
            raise RuntimeError(f"{name} (made to fail by the probe)")

        # the register step's two parts: the .maxnreg decision, and reading the cubin before it
        setattr(pipeline, "spend_register_budget" if name == "register-step-fails" else "kernel_resources", broken)
        activate("force")
        return {p: compile_probe(p) for p in ("fp16", "no_dot")}
    if name in ("cache-write", "cache-read"):
        activate("force")
        return compile_probe("fp16")
    if name == "cache-off":
        return compile_probe("fp16")
    if name == "cache-other-tag":
        from caovan_kernels.tensorcore75 import cache

        cache.hook_tag = lambda: "caovan-tc75-another-build"
        activate("force")
        return compile_probe("fp16")
    raise SystemExit(f"unknown scenario {name}")


if __name__ == "__main__":
    tensorcore75._process = tensorcore75.TensorCore75Hook(LOG.append)
    out = scenario(sys.argv[1])
    print(json.dumps({"triton": triton.__version__, "log": LOG, "result": out}))
