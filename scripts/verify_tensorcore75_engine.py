"""TensorCore75 inside CUDA vLLM on the Turing proxy: the demo model served on the sm_75 code path, hook on vs off.

    python scripts/verify_tensorcore75_engine.py start on|off DEMO_MODEL_DIR --out-dir DIR
    python scripts/verify_tensorcore75_engine.py serve on|off --out-dir DIR [--timeout S]
    python scripts/verify_tensorcore75_engine.py compare DIR [--report FILE]

`start` launches one engine through caovan-vllm-serve in its own session and returns (engines outlive the command
that started them, so a slow cold start can span several commands); each engine gets an empty Triton cache, so its
ready time is a cold start with all Triton compilation. Both: dtype half, MTP=3, the Triton attention backend
forced, vLLM's Triton GDN prefill, eager mode, stock GDN kernels (caovan_mode=off: TensorCore75 acts on vLLM's own
kernels), CAOVAN_TURING_PROXY=triton (the sm_75 code path; Triton sees a 2080 Ti's launch limits, torch the real
GPU, which vLLM's torch.compile'd helpers need). `serve` waits until the engine
is ready, sends 10 prompts x 128 greedy tokens, times the first token of a 4000-token prompt three times, and stops
the engine. `compare` holds hook-on to hook-off: identical greedy tokens (or a rounding tie), draft acceptance
within 2 points, the TensorCore75 markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caovan_kernels import contract  # noqa: E402
from tests.support.acceptance_lock import GreedyRun, divergences, greedy_run  # noqa: E402
from tests.support.engine import Engine, free_port, group_alive, stop_group  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402

MAX_TOKENS = 128
LONG_PROMPT_TOKENS = 4000
ENGINE_ARGS = [
    "--dtype", "half", "--max-model-len", "4096", "--attention-backend", "TRITON_ATTN", "--enforce-eager",
    "--max-num-seqs", "8", "--max-num-batched-tokens", "4096", "--gpu-memory-utilization", "0.25",
    # a fixed KV budget skips vLLM's free-memory profiling, which another engine starting beside it would upset
    "--kv-cache-memory-bytes", "4000000000",
]


def _paths(out_dir: Path, name: str) -> dict[str, Path]:
    return {k: out_dir / f"{name}.{k}" for k in ("log", "engine.json", "json")}


def start(name: str, model: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = _paths(out_dir, name)
    config = {"caovan": True, "caovan_mode": "off", "caovan_turing_mma": "auto" if name == "on" else "off",
              "gdn_prefill_backend": "triton"}
    port = free_port()
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": contract.MTP_DEFAULT})
    args = ["--served-model-name", contract.EMBEDDED_SERVED_MODEL_NAME, "--speculative-config", spec,
            "--no-enable-prefix-caching", *ENGINE_ARGS, "--additional-config", json.dumps(config)]
    command = [sys.executable, "-m", "caovan_kernels.serve", str(model.resolve()), "--host", "127.0.0.1",
               "--port", str(port), *args]
    cache = out_dir / f"triton-cache-{name}"
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_CACHE_DIR": str(cache)}
    if name != "native":  # native: the GPU's own code path, the reference when the FMA engine cannot start in time
        env["CAOVAN_TURING_PROXY"] = "triton"
    process = subprocess.Popen(command, stdout=files["log"].open("wb"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True, cwd=out_dir)
    files["engine.json"].write_text(json.dumps({"pid": process.pid, "port": port, "started": time.time(),
                                                "command": command}))
    print(f"{name}: engine pid {process.pid} on port {port}, log {files['log']}")


def _long_prompt_ttft(base_url: str) -> list[float]:
    """Seconds to the first streamed token of a LONG_PROMPT_TOKENS-token prompt (token ids: no tokenizer guesswork)."""
    ids = [(i * 7919) % 200 + 10 for i in range(LONG_PROMPT_TOKENS)]
    times = []
    with httpx.Client(timeout=600) as client:
        for _ in range(3):
            t0 = time.perf_counter()
            with client.stream("POST", f"{base_url}/v1/completions", json={
                "model": contract.EMBEDDED_SERVED_MODEL_NAME, "prompt": ids, "max_tokens": 8, "temperature": 0,
                "stream": True}) as reply:
                reply.raise_for_status()
                first = None
                for line in reply.iter_lines():  # read to the end: the engine finishes the request either way
                    if first is None and line.startswith("data: ") and '"text"' in line:
                        first = time.perf_counter() - t0
                times.append(first if first is not None else float("nan"))
    return times


def serve(name: str, out_dir: Path, timeout_s: float) -> int:
    files = _paths(out_dir, name)
    meta = json.loads(files["engine.json"].read_text())
    base_url = f"http://127.0.0.1:{meta['port']}"
    deadline = time.monotonic() + timeout_s
    ready = None
    while time.monotonic() < deadline:
        if not group_alive(meta["pid"]):
            print(f"{name}: the engine exited before it was ready; log tail:\n{files['log'].read_text()[-3000:]}")
            return 1
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                ready = time.time()
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    if ready is None:
        waited = time.time() - meta["started"]
        print(f"{name}: not ready {waited:.0f} s after its start; still running (serve again to keep waiting)")
        return 2
    try:
        engine = Engine(None, meta["port"], files["log"])  # type: ignore[arg-type]
        result = greedy_run(engine, contract.EMBEDDED_SERVED_MODEL_NAME, EVAL_PROMPTS, MAX_TOKENS)
        ttft = _long_prompt_ttft(base_url)
    finally:
        stop_group(meta["pid"])
    import torch
    import triton
    import vllm

    versions = {"vllm": vllm.__version__, "torch": torch.__version__, "triton": triton.__version__,
                "gpu": torch.cuda.get_device_name(0), "date": datetime.date.today().isoformat()}
    files["json"].write_text(json.dumps({**asdict(result), "ready_s": ready - meta["started"], "ttft_4k_s": ttft,
                                         "versions": versions}))
    print(f"{name}: ready after {ready - meta['started']:.0f} s, acceptance {result.acceptance:.1%}, "
          f"4k-token TTFT {', '.join(f'{t:.3f}' for t in ttft)} s")
    return 0


def compare(out_dir: Path) -> tuple[bool, str]:
    base = "off" if _paths(out_dir, "off")["json"].exists() else "native"
    data = {"off": json.loads(_paths(out_dir, base)["json"].read_text()),
            "on": json.loads(_paths(out_dir, "on")["json"].read_text())}
    logs = {"off": _paths(out_dir, base)["log"].read_text(errors="replace"),
            "on": _paths(out_dir, "on")["log"].read_text(errors="replace")}
    runs = {n: GreedyRun(d["tokens"], d["acceptance"]) for n, d in data.items()}
    problems = divergences(EVAL_PROMPTS, runs["off"], runs["on"])
    def lines(name: str, marker: contract.Marker) -> list[tuple[str, dict]]:
        return [(line, v) for line in logs[name].splitlines() if (v := marker.read(line)) is not None]

    active = [line for line, v in lines("on", contract.TENSORCORE75_STATUS) if v["active"]]
    counts = [line for line, _ in lines("on", contract.TENSORCORE75_KERNELS)]
    if not active or not counts:
        problems.append("the hook-on engine log lacks the TensorCore75 ACTIVE line or its kernel counts")
    if any(v["active"] for _, v in lines("off", contract.TENSORCORE75_STATUS)):
        problems.append("the hook-off engine ran TensorCore75")
    for marker in (contract.PLUGIN_NAME, contract.TURING_PROXY):
        if marker not in logs["on"] or (marker not in logs["off"] and base == "off"):
            problems.append(f"marker missing from an engine log: {marker}")
    v = data["on"]["versions"]
    lines = [
        f"## TensorCore75 in CUDA vLLM on the Turing proxy ({v['date']})", "",
        f"- stack: vLLM {v['vllm']}, torch {v['torch']}, Triton {v['triton']}, {v['gpu']}; demo model, dtype half, "
        "MTP=3, TRITON_ATTN, Triton GDN prefill, eager, stock GDN kernels, CAOVAN_TURING_PROXY=triton",
        f"- compared with: {'the hook-off engine on the proxy' if base == 'off' else 'the native (sm_90) engine'}",
        f"- greedy: {len(EVAL_PROMPTS)} prompts x {MAX_TOKENS} tokens; draft acceptance {base} "
        f"{runs['off'].acceptance:.1%}, hook on {runs['on'].acceptance:.1%}",
        f"- cold start to ready (empty Triton cache): {base} {data['off']['ready_s']:.0f} s, hook on "
        f"{data['on']['ready_s']:.0f} s",
        f"- time to first token, 4000-token prompt (1st, 2nd, 3rd request): {base} "
        f"{', '.join(f'{t:.3f}' for t in data['off']['ttft_4k_s'])} s; hook on "
        f"{', '.join(f'{t:.3f}' for t in data['on']['ttft_4k_s'])} s",
        f"- hook-on log: {active[0] if active else '-'}; last count: {counts[-1] if counts else '-'}",
        f"- result: {'PASS' if not problems else 'FAIL'}", *[f"  - {p}" for p in problems], "",
    ]
    return not problems, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start")
    p_start.add_argument("name", choices=("on", "off", "native"))
    p_start.add_argument("model", type=Path)
    p_start.add_argument("--out-dir", type=Path, required=True)
    p_serve = sub.add_parser("serve")
    p_serve.add_argument("name", choices=("on", "off", "native"))
    p_serve.add_argument("--out-dir", type=Path, required=True)
    p_serve.add_argument("--timeout", type=float, default=540)
    p_cmp = sub.add_parser("compare")
    p_cmp.add_argument("out_dir", type=Path)
    p_cmp.add_argument("--report", type=Path)
    opts = parser.parse_args()
    if opts.command == "start":
        start(opts.name, opts.model, opts.out_dir)
        return 0
    if opts.command == "serve":
        return serve(opts.name, opts.out_dir, opts.timeout)
    ok, report = compare(opts.out_dir)
    print(report)
    if opts.report:
        opts.report.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
