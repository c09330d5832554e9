"""Which Triton kernels of the installed vLLM (and Caovan's own) get Turing tensor cores, and do they fit sm_75?

    python -m lab.tensorcore75_survey [--json FILE] [--only attention,gdn,caovan]     (from the repository root)

Runs, without a GPU, the real Python wrappers of vLLM's unified attention (prefill, decode, MTP verify; head_dim
128 and 256, GQA 6, block sizes 16 and the one vLLM gives Qwen3.6-27B at TP2) and GDN kernels (chunked prefill,
decode / verify update), and Caovan's GDNCore kernels, at Qwen3.6-27B's TP2 shapes in fp16, as a 2080 Ti would
launch them (caovan_kernels/turing/compile_only.py): every kernel, and every autotuning configuration TensorCore75's
pruning (tensorcore75/autotune.py) leaves to compile, is compiled for sm_75 with TensorCore75 on. For each binary it
records the decision (retargeted to mma, or kept and why), whether the PTX holds the Turing MMA instruction, the
shared memory, registers and spills as ptxas -v reports them for the PTX Triton keeps (after the .maxnreg rebuild,
tensorcore75/registers.py), the registers and local memory TensorCore75 read from the cubin, and whether the
autotuner times it.

Must run in a process of its own (compile-only changes Triton's driver for the whole process) with
TRITON_INTERPRET unset.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from caovan_kernels import tensorcore75
from caovan_kernels.tensorcore75.pipeline import (
    LOCAL_BYTES_KEY,
    MAXNREG_KEY,
    METADATA_KEY,
    REGISTERS_KEY,
)
from caovan_kernels.turing.compile_only import make_process_compile_only

SM75_SHARED = 64 * 1024
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_TURING_MMA = re.compile(r"mma\.sync\.aligned\.(m16n8k8|m8n8k16)\b")


@dataclass
class Compiled:
    group: str  # which wrapper call compiled it ("attention prefill hd256 bs16", "gdn prefill", ...)
    kernel: str
    decision: str  # "mma:fp16", "kept:fp32_dot", ...
    turing_mma_in_ptx: bool
    shared_bytes: int
    num_warps: int
    num_stages: int
    registers: int
    spill_bytes: int
    binary: str  # Triton's hash of the binary
    config: str  # its constexprs and warps: what tells configurations apart but for num_stages
    timed: bool  # launched, or left to time by its autotuner (False: compiled, then pruned for spilling)
    autotuner_configs: int  # configurations its autotuner had (after Triton's own pruning); 0: not autotuned
    cubin_registers: int  # what TensorCore75 read from the cubin (its metadata); -1: none recorded
    cubin_local_bytes: int
    maxnreg: int  # the .maxnreg TensorCore75 added; 0: ptxas's own register choice
    ptx_is_cubin_source: bool  # the PTX Triton stores is the text its cubin was assembled from

    @property
    def retargeted(self) -> bool:
        return self.decision.startswith("mma:")

    @property
    def fits(self) -> bool:
        return self.shared_bytes <= SM75_SHARED and self.spill_bytes == 0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _ptxas_v(backend: Any, ptx: str, options: Any) -> tuple[int, int]:
    """(registers, spill store + load bytes) from ptxas -v for `ptx`, assembled as Triton's own cubin stage does."""
    from triton import knobs

    captured = io.StringIO()
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(captured):
            backend.make_cubin(ptx, {}, options, backend.target.arch)
    finally:
        knobs.nvidia.dump_ptxas_log = False
    text = captured.getvalue()
    regs = _REGISTERS.search(text)
    return int(regs.group(1)) if regs else -1, sum(int(s) + int(ld) for s, ld in _SPILLS.findall(text))


class _Recorder:
    """Chained stage hook (installed before TensorCore75, so ours runs first) that runs ptxas -v on the PTX each
    cubin stage is handed (TensorCore75 may have assembled it in its ptx stage already, where ptxas's log is not
    printed), the compile listener's records, and the autotune prunings. Being a hook installed before ours, it is
    also the proof that chaining keeps an earlier hook working."""

    def __init__(self) -> None:
        self.group = "?"
        self.records: list[Compiled] = []
        self._ptxas: dict[str, tuple[int, int, str]] = {}  # binary hash -> registers, spills, digest of its PTX
        self._timed: dict[tuple[str, str], set[str | None]] = defaultdict(set)  # (group, kernel) -> timed binaries
        self._configs: dict[tuple[str, str], int] = defaultdict(int)  # (group, kernel) -> autotuner configurations

    def stages_hook(self, backend: Any, stages: dict, options: Any, language: Any, capability: int) -> None:
        cubin = stages.get("cubin")
        if cubin is None:
            return

        def read_ptxas(src: Any, metadata: dict) -> Any:
            out = cubin(src, metadata)
            self._ptxas[metadata["hash"]] = (*_ptxas_v(backend, src, options), _digest(src))
            return out

        stages["cubin"] = read_ptxas

    def listener(self, *, src: Any, metadata: dict, metadata_group: dict, times: Any, cache_hit: bool) -> None:
        decision = metadata.get(METADATA_KEY, "off")  # "off": compiled with TensorCore75 off (--mode off)
        ptx_path = next((p for name, p in metadata_group.items() if name.endswith(".ptx")), None)
        ptx = Path(ptx_path).read_text() if ptx_path else ""
        regs, spills, assembled = self._ptxas.get(metadata["hash"], (-1, -1, ""))
        self.records.append(Compiled(
            self.group, metadata["name"], decision, bool(_TURING_MMA.search(ptx)), metadata["shared"],
            metadata["num_warps"], metadata["num_stages"], regs, spills, metadata["hash"],
            _config_text(src, metadata["num_warps"]), True, 0, metadata.get(REGISTERS_KEY, -1),
            metadata.get(LOCAL_BYTES_KEY, -1), metadata.get(MAXNREG_KEY, 0), _digest(ptx) == assembled,
        ))  # fmt: skip

    def pruned(self, pruned: Any) -> None:
        """Observer of TensorCore75's autotune pruning: which binaries the autotuner will time."""
        self._timed[(self.group, pruned.kernel)].update(pruned.binaries)
        self._configs[(self.group, pruned.kernel)] += pruned.configs

    def finish(self) -> list[Compiled]:
        """The records, marked with whether their autotuner times them (kernels not autotuned are all launched)."""
        for r in self.records:
            timed = self._timed.get((r.group, r.kernel))
            r.timed = timed is None or r.binary in timed
            r.autotuner_configs = self._configs.get((r.group, r.kernel), 0)
        return self.records


def _config_text(src: Any, num_warps: int) -> str:
    """"BK=64, BV=32, ..., num_warps=4" from the compile's constexprs (keyed by argument position)."""
    names = src.fn.arg_names
    constants = sorted((names[k[0]] if isinstance(k, tuple) else str(k), v) for k, v in src.constants.items())
    return ", ".join([*(f"{k}={v}" for k, v in constants), f"num_warps={num_warps}"])


# The groups import torch, Triton and vLLM (through lab.vllm_kernels) when called: after survey() set Triton's cache.
def _attention_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from lab import vllm_kernels

    calls = []
    for case in vllm_kernels.attention_cases(prefill_tokens=256):
        inputs = vllm_kernels.attention_inputs(case, "cpu", torch.Generator().manual_seed(0))
        calls.append((f"vllm attention {case.name}",
                      lambda inputs=inputs: vllm_kernels.run_unified_attention(inputs)))
    return calls


def _gdn_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from lab import vllm_kernels

    gen = torch.Generator().manual_seed(0)
    prefill = vllm_kernels.gdn_prefill_inputs([200, 77], "cpu", gen)
    decode = vllm_kernels.gdn_decode_inputs(2, 1, "cpu", gen)
    verify = vllm_kernels.gdn_decode_inputs(2, 4, "cpu", gen)
    return [
        ("vllm gdn prefill", lambda: vllm_kernels.run_gdn_prefill(prefill)),
        ("vllm gdn decode", lambda: vllm_kernels.run_gdn_decode(decode)),
        ("vllm gdn verify", lambda: vllm_kernels.run_gdn_decode(verify)),
    ]


def _caovan_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from caovan_kernels import gdn
    from lab import vllm_kernels

    gen = torch.Generator().manual_seed(0)
    p = vllm_kernels.gdn_prefill_inputs([200, 77], "cpu", gen)
    d = vllm_kernels.gdn_decode_inputs(2, 4, "cpu", gen)
    h0_kv = p.h0.transpose(-1, -2).contiguous()  # GDNCore's public prefill keeps fla's [K, V] states
    return [
        ("caovan gdn prefill", lambda: gdn.chunk_gated_delta_rule(
            p.q, p.k, p.v, p.g, p.beta, initial_state=h0_kv, output_final_state=True,
            cu_seqlens=p.cu_seqlens.to(torch.int32))),
        ("caovan gdn verify", lambda: gdn.fused_sigmoid_gating_delta_rule_update(
            d.A_log, d.a, d.b, d.dt_bias, d.q, d.k, d.v, initial_state=d.cache, cu_seqlens=d.cu_seqlens,
            ssm_state_indices=d.slots, num_accepted_tokens=d.accepted, use_qk_l2norm_in_kernel=True,
            out=torch.empty_like(d.v))),
    ]  # fmt: skip


GROUPS: dict[str, Callable[[], list[tuple[str, Callable[[], Any]]]]] = {
    "attention": _attention_calls, "gdn": _gdn_calls, "caovan": _caovan_calls,
}


def survey(groups: list[str], mode: str = "force") -> list[Compiled]:
    """Compile everything the chosen groups launch; call in a fresh process (see the module docstring)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: the survey compiles for sm_75")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="caovan-survey-")  # every kernel built, none reused
    from triton import knobs  # Triton, torch and vLLM only once its cache folder is set

    from lab.vllm_kernels import use_real_triton

    make_process_compile_only()
    recorder = _Recorder()
    knobs.runtime.add_stages_inspection_hook = recorder.stages_hook
    knobs.compilation.listener = recorder.listener
    status = tensorcore75.process().activate(mode)
    tensorcore75.process().autotune.observer = recorder.pruned
    if status.active != (mode == "force"):
        raise RuntimeError(f"TensorCore75 is not as asked ({mode}): {status.detail}")
    if "attention" in groups or "gdn" in groups:
        use_real_triton()
    for group in groups:
        for label, call in GROUPS[group]():
            recorder.group = label
            call()
    return recorder.finish()


def summary(records: list[Compiled]) -> list[dict[str, Any]]:
    """One row per (wrapper group, kernel): configurations (the autotuner's, compiled, timed), decisions, and the
    worst case of each resource, over every binary compiled and over those timed."""
    rows: dict[tuple[str, str], list[Compiled]] = defaultdict(list)
    for r in records:
        rows[(r.group, r.kernel)].append(r)
    out = []
    for (group, kernel), rs in rows.items():
        decisions = sorted({r.decision for r in rs})
        timed = [r for r in rs if r.timed]
        out.append({
            "group": group, "kernel": kernel, "configs": rs[0].autotuner_configs or len(rs), "compiled": len(rs),
            "timed": len(timed), "decisions": decisions,
            "retargeted": sum(r.retargeted for r in rs), "turing_mma_in_ptx": sum(r.turing_mma_in_ptx for r in rs),
            "max_shared": max(r.shared_bytes for r in rs), "over_64k": sum(r.shared_bytes > SM75_SHARED for r in rs),
            "max_registers": max(r.registers for r in rs), "max_spill": max(r.spill_bytes for r in rs),
            "max_spill_timed": max((r.spill_bytes for r in timed), default=0),
            "maxnreg_rebuilt": sum(r.maxnreg > 0 for r in rs), "fitting_configs": sum(r.fits for r in rs),
        })  # fmt: skip
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """`cfgs`: the autotuner's configurations; `built`: compiled; `timed`: left to time; `spill`: the worst over the
    binaries built, `timed spill` over those timed; `maxnreg`: binaries rebuilt with TensorCore75's .maxnreg."""
    head = (f"{'wrapper call':<34} {'kernel':<46} {'cfgs':>4} {'built':>5} {'timed':>5} {'mma':>4} {'in PTX':>6} "
            f"{'max smem':>9} {'>64K':>4} {'regs':>4} {'spill':>5} {'timed spill':>11} {'maxnreg':>7} {'fit':>4}  "
            "decision")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['group'][:34]:<34} {r['kernel'][:46]:<46} {r['configs']:>4} {r['compiled']:>5} {r['timed']:>5} "
            f"{r['retargeted']:>4} {r['turing_mma_in_ptx']:>6} {r['max_shared']:>9} {r['over_64k']:>4} "
            f"{r['max_registers']:>4} {r['max_spill']:>5} {r['max_spill_timed']:>11} {r['maxnreg_rebuilt']:>7} "
            f"{r['fitting_configs']:>4}  {', '.join(r['decisions'])}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write every compiled configuration here")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups of {', '.join(GROUPS)}")
    parser.add_argument("--mode", choices=("force", "off"), default="force",
                        help="off: Triton's own sm_75 lowering, for comparison")
    opts = parser.parse_args(argv)
    groups = [g for g in opts.only.split(",") if g]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    records = survey(groups, opts.mode)
    if opts.json:
        opts.json.write_text(json.dumps([asdict(r) for r in records], indent=1))
    print(table(summary(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
