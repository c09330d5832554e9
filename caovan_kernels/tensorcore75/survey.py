"""Which Triton kernels of the installed vLLM (and Caovan's own) get Turing tensor cores, and do they fit sm_75?

    python -m caovan_kernels.tensorcore75.survey [--json FILE] [--only attention,gdn,caovan]

Runs, without a GPU, the real Python wrappers of vLLM's unified attention (prefill, decode, MTP verify; head_dim
128 and 256, GQA 6, block sizes 16 and the one vLLM gives Qwen3.6-27B at TP2) and GDN kernels (chunked prefill,
decode / verify update), and Caovan's GDNCore kernels, at Qwen3.6-27B's TP2 shapes in fp16, as a 2080 Ti would
launch them (turing/compile_only.py): every kernel and every autotuning configuration is compiled for sm_75 with
TensorCore75 on. For each it records the decision (retargeted to mma, or kept and why), whether the PTX holds the
Turing MMA instruction, the shared memory, and registers and spills as ptxas -v reports them for sm_75.

Must run in a process of its own (compile-only changes Triton's driver for the whole process) with
TRITON_INTERPRET unset.
"""

from __future__ import annotations

import argparse
import contextlib
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

    @property
    def retargeted(self) -> bool:
        return self.decision.startswith("mma:")

    @property
    def fits(self) -> bool:
        return self.shared_bytes <= SM75_SHARED and self.spill_bytes == 0


class _Recorder:
    """Chained stage hook (installed before TensorCore75, so ours runs first) that reads ptxas -v for each cubin,
    plus the compile listener's records. Being a hook installed before ours, it is also the proof that chaining
    keeps an earlier hook working."""

    def __init__(self) -> None:
        self.group = "?"
        self.records: list[Compiled] = []
        self._ptxas: dict[str, tuple[int, int]] = {}

    def stages_hook(self, backend: Any, stages: dict, options: Any, language: Any, capability: int) -> None:
        cubin = stages.get("cubin")
        if cubin is None:
            return

        def read_ptxas(src: Any, metadata: dict) -> Any:
            from triton import knobs

            captured = io.StringIO()
            knobs.nvidia.dump_ptxas_log = True
            try:
                with contextlib.redirect_stdout(captured):
                    out = cubin(src, metadata)
            finally:
                knobs.nvidia.dump_ptxas_log = False
            text = captured.getvalue()
            regs = _REGISTERS.search(text)
            spills = sum(int(s) + int(ld) for s, ld in _SPILLS.findall(text))
            self._ptxas[metadata["hash"]] = (int(regs.group(1)) if regs else -1, spills)
            return out

        stages["cubin"] = read_ptxas

    def listener(self, *, src: Any, metadata: dict, metadata_group: dict, times: Any, cache_hit: bool) -> None:
        from caovan_kernels.tensorcore75.pipeline import METADATA_KEY

        decision = metadata.get(METADATA_KEY, "off")  # "off": compiled with TensorCore75 off (--mode off)
        ptx_path = next((p for name, p in metadata_group.items() if name.endswith(".ptx")), None)
        ptx = Path(ptx_path).read_text() if ptx_path else ""
        regs, spills = self._ptxas.get(metadata["hash"], (-1, -1))
        self.records.append(Compiled(
            self.group, metadata["name"], decision, bool(_TURING_MMA.search(ptx)), metadata["shared"],
            metadata["num_warps"], metadata["num_stages"], regs, spills,
        ))  # fmt: skip


def _attention_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from caovan_kernels.turing import vllm_kernels as vk

    calls = []
    for case in vk.attention_cases(prefill_tokens=256):
        inputs = vk.attention_inputs(case, "cpu", torch.Generator().manual_seed(0))
        calls.append((f"vllm attention {case.name}", lambda inputs=inputs: vk.run_unified_attention(inputs)))
    return calls


def _gdn_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from caovan_kernels.turing import vllm_kernels as vk

    gen = torch.Generator().manual_seed(0)
    prefill = vk.gdn_prefill_inputs([200, 77], "cpu", gen)
    decode = vk.gdn_decode_inputs(2, 1, "cpu", gen)
    verify = vk.gdn_decode_inputs(2, 4, "cpu", gen)
    return [
        ("vllm gdn prefill", lambda: vk.run_gdn_prefill(prefill)),
        ("vllm gdn decode", lambda: vk.run_gdn_decode(decode)),
        ("vllm gdn verify", lambda: vk.run_gdn_decode(verify)),
    ]


def _caovan_calls() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    from caovan_kernels import gdn
    from caovan_kernels.turing import vllm_kernels as vk

    gen = torch.Generator().manual_seed(0)
    p = vk.gdn_prefill_inputs([200, 77], "cpu", gen)
    d = vk.gdn_decode_inputs(2, 4, "cpu", gen)
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
    from triton import knobs

    from caovan_kernels import tensorcore75
    from caovan_kernels.turing.compile_only import make_process_compile_only
    from caovan_kernels.turing.vllm_kernels import use_real_triton

    make_process_compile_only()
    recorder = _Recorder()
    knobs.runtime.add_stages_inspection_hook = recorder.stages_hook
    knobs.compilation.listener = recorder.listener
    status = tensorcore75.process().activate(mode)
    if status.active != (mode == "force"):
        raise RuntimeError(f"TensorCore75 is not as asked ({mode}): {status.detail}")
    if "attention" in groups or "gdn" in groups:
        use_real_triton()
    for group in groups:
        for label, call in GROUPS[group]():
            recorder.group = label
            call()
    return recorder.records


def summary(records: list[Compiled]) -> list[dict[str, Any]]:
    """One row per (wrapper group, kernel): configurations, decisions, and the worst case of each resource."""
    rows: dict[tuple[str, str], list[Compiled]] = defaultdict(list)
    for r in records:
        rows[(r.group, r.kernel)].append(r)
    out = []
    for (group, kernel), rs in rows.items():
        decisions = sorted({r.decision for r in rs})
        out.append({
            "group": group, "kernel": kernel, "configs": len(rs), "decisions": decisions,
            "retargeted": sum(r.retargeted for r in rs), "turing_mma_in_ptx": sum(r.turing_mma_in_ptx for r in rs),
            "max_shared": max(r.shared_bytes for r in rs), "over_64k": sum(r.shared_bytes > SM75_SHARED for r in rs),
            "max_registers": max(r.registers for r in rs), "max_spill": max(r.spill_bytes for r in rs),
            "fitting_configs": sum(r.fits for r in rs),
        })  # fmt: skip
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'wrapper call':<34} {'kernel':<46} {'cfgs':>4} {'mma':>4} {'in PTX':>6} {'max smem':>9} {'>64K':>4} "
            f"{'regs':>4} {'spill':>5} {'fit':>4}  decision")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['group'][:34]:<34} {r['kernel'][:46]:<46} {r['configs']:>4} {r['retargeted']:>4} "
            f"{r['turing_mma_in_ptx']:>6} {r['max_shared']:>9} {r['over_64k']:>4} {r['max_registers']:>4} "
            f"{r['max_spill']:>5} {r['fitting_configs']:>4}  {', '.join(r['decisions'])}"
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
