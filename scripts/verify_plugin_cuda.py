"""AcceptanceLock on a CUDA GPU: the demo model with MTP=3, stock vLLM kernels vs GDNCore required.

Run on a machine with CUDA vLLM installed and this project installed beside it, from the repository root:
    python scripts/verify_plugin_cuda.py run stock DEMO_MODEL_DIR --out-dir DIR     # caovan_mode=off
    python scripts/verify_plugin_cuda.py run gdncore DEMO_MODEL_DIR --out-dir DIR   # auto + caovan_require_turbo3
    python scripts/verify_plugin_cuda.py compare DIR [--report FILE]
Each `run` starts one engine (CUDA graphs and torch.compile on, as users run it), sends the same greedy chat
completions and saves tokens, draft acceptance and the engine log in DIR; the two runs can be separate calls.
`compare` checks: markers present, GDNCore prefill calls and GPU decode steps counted in the engine log, greedy
tokens equal (or a tie within rounding), draft acceptance within 2 points; exit code 0 when all hold.
CI cannot run it (no GPU there); its last result goes to docs/verification.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caovan_kernels import contract  # noqa: E402
from caovan_kernels.contract import DEVICE_STEPS, DISPATCH, REAL_PREFILL  # noqa: E402
from caovan_kernels.vllm import require_registered  # noqa: E402
from tests.support.acceptance_lock import GreedyRun, divergences, greedy_run  # noqa: E402
from tests.support.engine import start_engine, stop_engine  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402

MAX_TOKENS = 128
CONFIGS = {
    "stock": {"caovan": True, "caovan_mode": "off"},
    "gdncore": {"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True},
}
# The same for both runs; fewer sequences than vLLM's default keep CUDA graph capture short.
GPU_ARGS = ["--max-num-seqs", "8", "--gpu-memory-utilization", "0.5"]


def _versions() -> dict[str, str]:
    import torch
    import triton
    import vllm

    return {"vllm": vllm.__version__, "torch": torch.__version__, "triton": triton.__version__,
            "gpu": torch.cuda.get_device_name(0), "date": datetime.date.today().isoformat()}


def run(name: str, model: Path, out_dir: Path) -> None:
    require_registered()  # otherwise every engine runs stock: the gdncore run would only fail compare
    # Triton GDN prefill: the CUDA build of vLLM 0.21 has no FlashInfer GDN prefill installed here.
    config = {**CONFIGS[name], "gdn_prefill_backend": "triton"}
    args = contract.embedded_engine_args() + GPU_ARGS + ["--additional-config", json.dumps(config)]
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f"{name}.log"
    engine = start_engine(model, args, {}, log_path, timeout_s=540)
    try:
        result = greedy_run(engine, contract.EMBEDDED_SERVED_MODEL_NAME, EVAL_PROMPTS, MAX_TOKENS)
    finally:
        stop_engine(engine)
    (out_dir / f"{name}.json").write_text(json.dumps({**asdict(result), "versions": _versions()}))
    print(f"{name}: draft acceptance {result.acceptance:.1%}, log {log_path}")


def _load(out_dir: Path, name: str) -> tuple[GreedyRun, dict[str, str], str]:
    data = json.loads((out_dir / f"{name}.json").read_text())
    return GreedyRun(data["tokens"], data["acceptance"]), data["versions"], (out_dir / f"{name}.log").read_text()


def compare(out_dir: Path) -> tuple[bool, str]:
    stock, versions, stock_log = _load(out_dir, "stock")
    ours, _, our_log = _load(out_dir, "gdncore")
    problems = divergences(EVAL_PROMPTS, stock, ours)
    for marker in (REAL_PREFILL, DISPATCH, "caovan_mode=auto", "speculative_config=auto MTP=3"):
        if marker not in our_log:
            problems.append(f"marker missing from the GDNCore engine log: {marker}")
    if REAL_PREFILL in stock_log or DISPATCH in stock_log:
        problems.append("the stock engine ran GDNCore")
    prefill = [int(n) for n in re.findall(r"\[Caovan GDNCore\] kernel calls: prefill=(\d+)", our_log)]
    steps = [int(n) for n in re.findall(rf"{re.escape(DEVICE_STEPS)}: (\d+)", our_log)]
    if not prefill or not steps:
        problems.append("no GDNCore prefill calls or GPU decode steps counted in the engine log")
    lines = [
        f"## GDNCore inside CUDA vLLM ({versions['date']})",
        "",
        f"- stack: vLLM {versions['vllm']}, torch {versions['torch']}, Triton {versions['triton']}, {versions['gpu']}",
        f"- demo model, MTP=3, CUDA graphs on, {len(EVAL_PROMPTS)} prompts x {MAX_TOKENS} greedy tokens per engine",
        f"- draft acceptance: stock {stock.acceptance:.1%}, GDNCore {ours.acceptance:.1%}",
        f"- GDNCore activity in the engine log: prefill calls (last milestone) {max(prefill, default=0)}, "
        f"decode steps counted on the GPU (last milestone) {max(steps, default=0)}",
        f"- result: {'PASS' if not problems else 'FAIL'}",
        *[f"  - {p}" for p in problems],
        "",
    ]
    return not problems, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="start one engine and record its greedy outputs")
    run_parser.add_argument("name", choices=sorted(CONFIGS))
    run_parser.add_argument("model", type=Path)
    run_parser.add_argument("--out-dir", type=Path, required=True)
    compare_parser = sub.add_parser("compare", help="hold the GDNCore run to the stock run")
    compare_parser.add_argument("out_dir", type=Path)
    compare_parser.add_argument("--report", type=Path)
    opts = parser.parse_args()
    if opts.command == "run":
        run(opts.name, opts.model, opts.out_dir)
        return 0
    ok, report = compare(opts.out_dir)
    print(report)
    if opts.report:
        opts.report.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
