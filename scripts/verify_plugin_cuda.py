"""AcceptanceLock on a CUDA GPU: the demo model with MTP=3, stock vLLM kernels vs GDNCore required.

Run on a machine with CUDA vLLM installed and this project installed beside it, from the repository root:
    python scripts/verify_plugin_cuda.py DEMO_MODEL_DIR [--out result.md]
It starts two engines one after the other (stock: caovan_mode=off; ours: caovan_mode=auto with
caovan_require_turbo3), sends the same greedy chat completions, and checks: markers present, GDNCore kernel calls
counted in the engine log, greedy tokens equal (or a tie within rounding), draft acceptance within 2 points.
Exit code 0 when all hold. CI cannot run it (no GPU there); its last result goes to docs/verification.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caovan_kernels.vllm.activity import DISPATCH, REAL_PREFILL  # noqa: E402
from caovan_manager import embedded  # noqa: E402
from tests.support.acceptance_lock import divergences, greedy_run  # noqa: E402
from tests.support.engine import start_engine, stop_engine  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402

MAX_TOKENS = 128


def _versions() -> str:
    import torch
    import triton
    import vllm

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"vLLM {vllm.__version__}, torch {torch.__version__}, Triton {triton.__version__}, {gpu}"


def _run(model: Path, plugin_config: dict, log_path: Path):
    # Triton GDN prefill: the CUDA build of vLLM 0.21 has no FlashInfer GDN prefill installed here.
    config = {**plugin_config, "gdn_prefill_backend": "triton"}
    args = embedded.engine_args() + ["--additional-config", json.dumps(config)]
    engine = start_engine(model, args, {}, log_path, timeout_s=900)
    try:
        return greedy_run(engine, embedded.SERVED_MODEL_NAME, EVAL_PROMPTS, MAX_TOKENS), engine.log_text()
    finally:
        stop_engine(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="caovan-verify-"))
    stock, stock_log = _run(opts.model, {"caovan": True, "caovan_mode": "off"}, logs / "stock.log")
    ours, our_log = _run(opts.model, {"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True},
                         logs / "gdncore.log")
    problems = divergences(EVAL_PROMPTS, stock, ours)
    for marker in (REAL_PREFILL, DISPATCH, "caovan_mode=auto", "speculative_config=auto MTP=3"):
        if marker not in our_log:
            problems.append(f"marker missing from the GDNCore engine log: {marker}")
    if REAL_PREFILL in stock_log:
        problems.append("the stock engine ran GDNCore")
    calls = re.findall(r"\[Caovan GDNCore\] kernel calls: prefill=(\d+) decode=(\d+)", our_log)
    last = calls[-1] if calls else ("0", "0")
    lines = [
        f"## GDNCore inside CUDA vLLM ({datetime.date.today().isoformat()})",
        "",
        f"- stack: {_versions()}",
        f"- demo model, MTP=3, {len(EVAL_PROMPTS)} prompts x {MAX_TOKENS} greedy tokens",
        f"- draft acceptance: stock {stock.acceptance:.1%}, GDNCore {ours.acceptance:.1%}",
        f"- GDNCore kernel calls logged (last milestone): prefill={last[0]} decode={last[1]}",
        f"- result: {'PASS' if not problems else 'FAIL'}",
        *[f"  - {p}" for p in problems],
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if opts.out:
        opts.out.write_text(report)
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
