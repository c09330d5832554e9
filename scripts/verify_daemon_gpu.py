"""The daemon on a CUDA GPU: NVML figures in /metrics, the proxy's cost beside a fast engine, and a restart that
waits for the old engine's GPU memory to be released.

Run on a machine with CUDA vLLM and this project installed, from the repository root:
    python scripts/verify_daemon_gpu.py DEMO_MODEL_DIR [--out-dir DIR]
It starts `caovan serve DEMO_MODEL_DIR -- <the demo's vLLM arguments>`, then: reads /metrics for the caovan_gpu_*
series and checks NVML sees the engine's processes; runs the proxy benchmark (1, 16, 64 streams, direct vs
through the daemon, the same code as benchmarks/proxy_bench.py); POSTs /restart and times it (unless
--no-restart); stops the daemon with Ctrl-C and checks that no engine process is left and NVML shows no process of
the old engine. It prints a Markdown report (also DIR/daemon-gpu.md) and exits 0 when every check held. CI cannot
run it (no GPU there).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.proxy_bench import bench, start_daemon, stop_daemon, table, wait_ready  # noqa: E402
from caovan_kernels import contract  # noqa: E402
from caovan_manager.gpu import gpu_holders, gpu_samples  # noqa: E402

# Beside the demo's arguments: vLLM 0.21's CUDA build here has no FlashInfer GDN prefill.
GPU_ARGS = ["--gpu-memory-utilization", "0.5", "--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
GPU_SERIES = ("caovan_gpu_memory_used_bytes", "caovan_gpu_memory_total_bytes", "caovan_gpu_utilization_percent",
              "caovan_gpu_temperature_celsius", "caovan_gpu_power_watts")


def engine_pids(status: dict) -> set[int]:
    root = psutil.Process(status["engine"]["pid"])
    return {root.pid, *(child.pid for child in root.children(recursive=True))}


def describe(pids: set[int]) -> list[str]:
    """Live (not zombie) processes among pids, with their process group and command."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{pid} (pgid {os.getpgid(pid)}: {' '.join(proc.cmdline())[:120]})")
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    return found


def wait_state(url: str, wanted: str, timeout_s: float, not_before: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/status", timeout=5).json()
        if status["state"] == wanted and (status["engine"] or {}).get("run_id", 0) > not_before:
            return status
        time.sleep(0.5)
    raise SystemExit(f"the daemon did not reach {wanted!r} within {timeout_s} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--out-dir", type=Path, default=Path("."))
    parser.add_argument("--concurrency", default="1,16,64", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--max-num-seqs", type=int, default=64, help="Engine batch size (the largest concurrency).")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating direct/daemon rounds per concurrency.")
    parser.add_argument("--routed", action="store_true", help="Serve the model as a models table's one entry, so "
                                                             "the daemon routes each request by its model.")
    parser.add_argument("--no-restart", action="store_true", help="Skip the restart check (80-95 s of engine "
                                                                 "start), for a GPU session short of time.")
    opts = parser.parse_args()
    bench_args = argparse.Namespace(concurrency=opts.concurrency, requests=2, rounds=opts.rounds, max_tokens=32,
                                    hop_samples=300)
    problems: list[str] = []
    lines: list[str] = []
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="caovan-daemon-gpu-") as tmp:
        engine_args = [*contract.embedded_engine_args(), *GPU_ARGS, "--max-num-seqs", str(opts.max_num_seqs)]
        daemon, url = start_daemon(str(opts.model), Path(tmp), engine_args, routed=opts.routed)
        try:
            started = time.monotonic()
            status = wait_ready(daemon, url)
            lines.append(f"- engine ready through the daemon in {time.monotonic() - started:.0f} s "
                         f"(vLLM {status['engine']['vllm_version']}, MTP {status['engine']['mtp_tokens']})")
            metrics = httpx.get(f"{url}/metrics", timeout=10).text
            for series in GPU_SERIES:
                values = re.findall(rf"^{series}{{[^}}]*}} ([0-9.eE+-]+)$", metrics, re.M)
                lines.append(f"- /metrics {series}: {', '.join(values) or 'absent'}")
                if not values:
                    problems.append(f"{series} missing from /metrics")
            pids = engine_pids(status)
            holders = gpu_holders(pids)
            lines.append(f"- NVML sees the engine's processes: {'; '.join(holders) or 'none'}")
            if not holders:
                problems.append("NVML lists none of the engine's processes: the memory-release wait cannot see them")

            results, hop = asyncio.run(bench(status["engine"]["address"], url, bench_args))
            lines += ["", table(results, hop), ""]

            if opts.no_restart:
                lines.append("- POST /restart: not checked this run (--no-restart)")
            else:
                run_id = status["engine"]["run_id"]
                restart_at = time.monotonic()
                httpx.post(f"{url}/restart", json={}, timeout=30).raise_for_status()
                status = wait_state(url, "ready", 600, not_before=run_id)
                lines.append(f"- POST /restart to ready again: {time.monotonic() - restart_at:.0f} s; old engine's "
                             f"processes on the GPU afterwards: {'; '.join(gpu_holders(pids)) or 'none'}; "
                             f"last_error: {status['last_error'] or 'none'}")
                if gpu_holders(pids) or "GPU memory still held" in status["last_error"]:
                    problems.append("the old engine still held GPU memory after the restart")
                pids = engine_pids(status)
        finally:
            if problem := stop_daemon(daemon):
                problems.append(problem)
            (opts.out_dir / "daemon.log").write_bytes((Path(tmp) / "daemon.log").read_bytes())
        first_seen = describe(pids)
        deadline = time.monotonic() + 15  # processes outside the group end on their own once their parent is gone
        while describe(pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = describe(pids)
        lines.append(f"- right after Ctrl-C: {first_seen or 'no engine process'}")
        held = gpu_holders(pids)
        memory = ", ".join(f"GPU {s.index} {s.memory_used_bytes / 2**30:.2f} GiB used" for s in gpu_samples())
        lines.append(f"- after Ctrl-C: engine processes left {left or 'none'}, on the GPU {held or 'none'}; {memory}")
        if left or held:
            problems.append("engine processes or their GPU memory outlived the daemon")

    import torch
    import vllm

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    gpus = ", ".join(sorted({s.name for s in gpu_samples()})) or "no GPU"  # NVML: no CUDA context in this process
    header = [f"## The daemon beside CUDA vLLM ({datetime.date.today().isoformat()})", "",
              f"- stack: vLLM {vllm.__version__}, torch {torch.__version__}, {gpus}, {psutil.cpu_count()} CPU "
              f"cores; uvloop {version('uvloop')}, httptools {version('httptools')} (uvicorn falls back to asyncio's "
              f"loop and a pure-Python parser without them); demo model, CUDA graphs on; load: {opts.rounds} "
              "alternating rounds x 2 streamed chat completions per stream, 32 max tokens",
              "- daemon: " + ("routing by model (the model as a models table's one entry)" if opts.routed
                              else "one engine (`caovan serve MODEL`)")]
    report = "\n".join([*header, *lines, f"- result: {'PASS' if not problems else 'FAIL'}",
                        *[f"  - {p}" for p in problems], ""])
    print(report)
    (opts.out_dir / "daemon-gpu.md").write_text(report)
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
