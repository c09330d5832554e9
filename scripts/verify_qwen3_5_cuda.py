"""The user's architecture end to end on CUDA vLLM: the Qwen3.5/3.6 demo (`caovan demo-model --arch qwen3_5`, fp16
and `--awq`) served through `caovan serve`, GDNCore against vLLM's own GDN kernels, natively or on the Turing proxy.

    python scripts/verify_qwen3_5_cuda.py start RUN MODEL_DIR --out-dir DIR
    python scripts/verify_qwen3_5_cuda.py serve RUN --out-dir DIR [--timeout S]
    python scripts/verify_qwen3_5_cuda.py serve-ready DIR [--for S]
    python scripts/verify_qwen3_5_cuda.py compare DIR [--report FILE]

RUN is PATH-WEIGHTS-KERNELS: PATH native or proxy (CAOVAN_TURING_PROXY=triton: the sm_75 code path, TensorCore75 on
in auto mode), WEIGHTS fp16 or awq (the label; MODEL_DIR holds them), KERNELS stock (caovan_mode=off and
caovan_split_kv=off: vLLM's kernels throughout), gdncore (caovan_mode=force: GDNCore on both paths, whatever auto would
pick, see auto_choice; the split-KV verify attention as auto takes it), splitkv (vLLM's GDN kernels, the split-KV
verify attention alone) or dvN (stock kernels, DraftVocab drafting over the tokenizer's first N ids). `start` (which
needs this project installed as a package: vLLM finds the plugin by entry point) launches one daemon in its own
session and returns, so several engines start side by side on one GPU and a cold start may span commands. The engine
gets what the launch profile gives Qwen3.6-27B-AWQ on 2x RTX 2080 Ti 22G (the profile is computed here from the real
config in tests/caovan_kernels/profile/fixtures), without what needs two cards or the whole card: dtype half, MTP=3,
4 sequences, 2048-token prefill chunks, the KV dtype it picks, vLLM's default prefix caching; pinned beside it: the
Triton attention backend (what vLLM picks on sm_75), a small fixed KV budget so that four engines share the GPU, and
eager mode on the proxy (its Triton kernels compile for minutes each start). `serve` waits for ready, sends 10
prompts x 128 greedy tokens through the daemon's /v1 with the official client, records /status, the engine's draft
acceptance and which quantized linear kernel vLLM chose, then stops the daemon with Ctrl-C. `serve-ready` runs
`serve` for every started daemon of DIR as it becomes ready, side by side, and leaves those still starting for its
next call (GPU commands are time-limited). `compare` holds each gdncore run to its stock twin: identical greedy
tokens (or a rounding tie), acceptance within 2 points, the markers, and each dvN run to its stock twin on tokens
alone (DraftVocab may move acceptance, never a token), /status naming the model with MTP and
acceptance; it exits 0 when all hold. CI cannot run it (no GPU there); its results go to docs/verification.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caovan_kernels import contract  # noqa: E402
from caovan_kernels.profile.gpus import parse_inventory  # noqa: E402
from caovan_kernels.profile.planner import build_profile  # noqa: E402
from caovan_kernels.turing import proxy  # noqa: E402
from caovan_kernels.vllm import require_registered  # noqa: E402
from tests.support.acceptance_lock import GreedyRun, divergences, greedy_via  # noqa: E402
from tests.support.engine import free_port, group_alive  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402

MAX_TOKENS = 128
SERVED = "qwen3_5-demo"
REAL_CONFIG = ROOT / "tests" / "caovan_kernels" / "profile" / "fixtures" / "qwen3_6_27b_awq"
TURING_BOX = "2x RTX 2080 Ti 22GB sm75"
# The 27B profile's flags that describe two cards or a whole card, not the model's serving choices.
NOT_ON_ONE_SHARED_GPU = {"--tensor-parallel-size", "--disable-custom-all-reduce", "--gpu-memory-utilization",
                         "--max-model-len"}
PINNED = ["--attention-backend", "TRITON_ATTN", "--max-model-len", "4096", "--gpu-memory-utilization", "0.15",
          # a fixed KV budget skips vLLM's free-memory profiling, which engines starting beside it would upset
          "--kv-cache-memory-bytes", "2000000000"]
KERNELS = {"stock": {"caovan": True, "caovan_mode": "off", "caovan_split_kv": "off"},
           "gdncore": {"caovan": True, "caovan_mode": "force"},
           "splitkv": {"caovan": True, "caovan_mode": "off", "caovan_split_kv": "auto"}}
# dvN: the stock kernels with DraftVocab's drafter over the tokenizer's first N ids (issue 33's greedy identity).
RUN_NAME = re.compile(r"(native|proxy)-(fp16|awq)-(stock|gdncore|splitkv|dv(\d+))")
# vLLM names the kernel behind each quantized linear layer when it builds it.
LINEAR_KERNEL = re.compile(r"Using (\w+LinearKernel) for (\w+)")


def kernel_config(kernels: str) -> dict:
    """The plugin's --additional-config keys for a run's KERNELS part."""
    if kernels.startswith("dv"):
        return {**KERNELS["stock"], "caovan_draft_vocab": int(kernels[2:])}
    return KERNELS[kernels]


def turing_profile_args(on_proxy: bool) -> tuple[list[str], list[str]]:
    """(the 27B's 2x2080 Ti profile flags that apply on one shared GPU, the profile's full command). On the proxy the
    profile is planned as the engine will see it (CAOVAN_TURING_PROXY set), so its speculative config pins the
    drafter's attention backend too: vLLM picks the drafter's separately from the real GPU (FlashAttention here)."""
    saved = os.environ.get(proxy.ENV)
    os.environ.pop(proxy.ENV, None)
    if on_proxy:
        os.environ[proxy.ENV] = "triton"
    try:
        profile = build_profile(REAL_CONFIG, [], parse_inventory(TURING_BOX), None)
    finally:
        os.environ.pop(proxy.ENV, None)
        if saved is not None:
            os.environ[proxy.ENV] = saved
    pinned_here = {flag for flag in PINNED if flag.startswith("--")}
    kept, args = [], profile.args
    i = 0
    while i < len(args):
        flag = args[i].split("=", 1)[0]
        takes_value = "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag not in NOT_ON_ONE_SHARED_GPU | pinned_here:
            kept += args[i:i + 1 + takes_value]
        i += 1 + takes_value
    return kept, profile.args


def _files(out_dir: Path, run: str) -> dict[str, Path]:
    return {"meta": out_dir / f"{run}.start.json", "json": out_dir / f"{run}.json", "log": out_dir / f"{run}.log",
            "state": out_dir / f"state-{run}"}


def start(run: str, model: Path, out_dir: Path) -> None:
    require_registered()  # otherwise every run is stock, gdncore too: compare would tell only after the whole run
    path, _, kernels, _ = RUN_NAME.fullmatch(run).groups()
    files = _files(out_dir, run)
    files["state"].mkdir(parents=True, exist_ok=True)
    profile_args, full = turing_profile_args(on_proxy=path == "proxy")
    extra = {**kernel_config(kernels), "gdn_prefill_backend": "triton"}  # vLLM 0.21's CUDA build: no FlashInfer GDN
    engine_args = ["--served-model-name", SERVED, *profile_args, *PINNED,
                   *(["--enforce-eager"] if path == "proxy" else []), "--additional-config", json.dumps(extra)]
    port = free_port()
    config = files["state"] / "caovan.toml"
    config.write_text(f'port = {port}\nstate_dir = "{files["state"]}"\n[supervisor]\nstartup_timeout_s = 1500\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAOVAN_") and k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(out_dir / f"triton-cache-{path}")
    if path == "proxy":
        env["CAOVAN_TURING_PROXY"] = "triton"
    command = [sys.executable, "-c", "from caovan_manager.cli import main; main()", "serve", str(model.resolve()),
               "--config", str(config), "--", *engine_args]
    process = subprocess.Popen(command, stdout=(files["state"] / "daemon.out").open("wb"), stderr=subprocess.STDOUT,
                               env=env, start_new_session=True, cwd=files["state"])
    files["meta"].write_text(json.dumps({"pid": process.pid, "port": port, "started": time.time(), "model": str(model),
                                         "engine_args": engine_args, "profile_27b": full}))
    print(f"{run}: daemon pid {process.pid} on port {port}")


def _engine_log(state: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((state / "logs").rglob("*")) if p.is_file())


def _stop(pid: int) -> bool:
    """Ctrl-C the daemon's group; True when nothing of it was left to kill."""
    if group_alive(pid):
        os.killpg(pid, signal.SIGINT)
    deadline = time.monotonic() + 120
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if not group_alive(pid):
        return True
    os.killpg(pid, signal.SIGKILL)
    return False


def serve(run: str, out_dir: Path, timeout_s: float) -> int:
    files = _files(out_dir, run)
    meta = json.loads(files["meta"].read_text())
    url = f"http://127.0.0.1:{meta['port']}"
    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"{url}/status", timeout=5).json()
        except httpx.HTTPError:
            status = {}
        if status.get("state") in ("ready", "failed") or not group_alive(meta["pid"]):
            break
        time.sleep(2)
    result: dict = {"run": run, "status_at_ready": status, "ready_after_s": time.time() - meta["started"]}
    try:
        if status.get("state") != "ready":
            result["error"] = f"not ready: state {status.get('state')!r}, last error {status.get('last_error')!r}"
        else:
            greedy = greedy_via(f"{url}/v1", f"{url}/metrics/engine", SERVED, EVAL_PROMPTS, MAX_TOKENS)
            result.update(tokens=greedy.tokens, acceptance=greedy.acceptance)
            time.sleep(11)  # vLLM logs its spec-decoding line every 10 s: let the daemon parse one
            result["status_after"] = httpx.get(f"{url}/status", timeout=5).json()
    finally:
        result["clean_stop"] = _stop(meta["pid"])
        files["log"].write_text(_engine_log(files["state"]) + "\n" + (files["state"] / "daemon.out").read_text(
            errors="replace"))
        result["versions"] = _versions()
        files["json"].write_text(json.dumps(result))
    print(f"{run}: {result.get('error') or 'served'}; acceptance {result.get('acceptance')}; "
          f"ready after {result['ready_after_s']:.0f} s; clean stop {result['clean_stop']}")
    return 0 if "error" not in result else 1


def _status_state(port: int) -> str | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/status", timeout=5).json().get("state")
    except httpx.HTTPError:
        return None


def serve_ready(out_dir: Path, for_s: float) -> int:
    """`serve` every run started in out_dir that has no result yet, each as soon as its daemon is ready (or has
    failed or died), in parallel, for up to for_s seconds; runs still starting then are left running for a later
    call (a GPU session's commands are time-limited, and the proxy engines start for minutes)."""
    runs = sorted(p.name.removesuffix(".start.json") for p in out_dir.glob("*.start.json"))
    if not runs:
        print(f"no daemon was started in {out_dir} (no RUN.start.json there): run `start` first", file=sys.stderr)
        return 2
    pending = {run for run in runs if not _files(out_dir, run)["json"].exists()}
    codes: dict[str, Future] = {}
    deadline = time.monotonic() + for_s
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        while pending and time.monotonic() < deadline:
            for run in sorted(pending):
                meta = json.loads(_files(out_dir, run)["meta"].read_text())
                if not group_alive(meta["pid"]) or _status_state(meta["port"]) in ("ready", "failed"):
                    codes[run] = pool.submit(serve, run, out_dir, 30)
                    pending.discard(run)
            time.sleep(3)
    for run in sorted(pending):
        print(f"{run}: still starting after {for_s:.0f} s; left running, call serve-ready again")
    failed = [run for run, code in codes.items() if code.result() != 0]
    return 0 if not pending and not failed else 1


def _versions() -> dict[str, str]:
    import torch
    import triton
    import vllm

    return {"vllm": vllm.__version__, "torch": torch.__version__, "triton": triton.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
            "date": datetime.date.today().isoformat()}


def _check_run(run: str, data: dict, log: str, problems: list[str]) -> None:
    kernels = run.rsplit("-", 1)[1]
    if "error" in data:
        problems.append(f"{run}: {data['error']}")
        return
    after = data.get("status_after", {})
    if after.get("model") is None or (after.get("engine") or {}).get("mtp_tokens") != contract.MTP_DEFAULT:
        problems.append(f"{run}: /status shows model {after.get('model')!r}, MTP "
                        f"{(after.get('engine') or {}).get('mtp_tokens')!r}")
    if "spec_decode" not in after.get("latest", {}):
        problems.append(f"{run}: /status has no spec-decoding (acceptance) line yet")
    ran_ours = contract.REAL_PREFILL in log or contract.DISPATCH in log
    if kernels == "gdncore" and not (contract.REAL_PREFILL in log and contract.DISPATCH in log):
        problems.append(f"{run}: GDNCore markers missing from the engine log")
    if kernels != "gdncore" and ran_ours:
        problems.append(f"{run}: the stock engine ran GDNCore")
    split_kv = [contract.SPLIT_KV_MARKER.read(line) for line in log.splitlines()]
    split_active = any(v is not None and v["active"] for v in split_kv)
    if kernels in ("gdncore", "splitkv") and not split_active:
        problems.append(f"{run}: no '{contract.SPLIT_KV} ACTIVE' line in the engine log")
    if kernels not in ("gdncore", "splitkv") and split_active:
        problems.append(f"{run}: the split-KV verify attention was active in a stock engine")
    draft_vocab = [contract.DRAFT_VOCAB_MARKER.read(line) for line in log.splitlines()]
    active = [v for v in draft_vocab if v is not None and v["active"]]
    if kernels.startswith("dv") and not any(v["hot"] >= int(kernels[2:]) for v in active):
        problems.append(f"{run}: no '{contract.DRAFT_VOCAB} ACTIVE' line with at least {kernels[2:]} hot ids")
    if not kernels.startswith("dv") and active:
        problems.append(f"{run}: DraftVocab was active without being asked for")
    if not data.get("clean_stop"):
        problems.append(f"{run}: processes were left after Ctrl-C and had to be killed")


def compare(out_dir: Path) -> tuple[bool, str]:
    """Each run against its stock twin: GDNCore on tokens and acceptance, DraftVocab (dvN) on tokens alone."""
    problems: list[str] = []
    rows, versions = [], {}
    runs = sorted(p.name.removesuffix(".json") for p in out_dir.glob("*.json")
                  if RUN_NAME.fullmatch(p.name.removesuffix(".json")))
    for path in ("native", "proxy"):
        for weights in ("fp16", "awq"):
            twins = [run for run in runs if run.startswith(f"{path}-{weights}-")]
            results = {}
            for run in twins:
                files = _files(out_dir, run)
                data = json.loads(files["json"].read_text())
                log = files["log"].read_text(errors="replace")
                versions = data["versions"]
                _check_run(run, data, log, problems)
                linear = sorted({f"{k} ({m})" for k, m in LINEAR_KERNEL.findall(log)}) or ["unquantized"]
                results[run.rsplit("-", 1)[1]] = data
                rows.append(f"| {run} | {data['ready_after_s']:.0f} s | "
                            f"{data.get('acceptance', float('nan')):.1%} | {', '.join(linear)} |")
            stock = results.pop("stock", None)
            if stock is not None and not results:
                problems.append(f"{path}-{weights}-stock: no gdncore, splitkv or dvN run to compare it with")
            for kernels, data in results.items():
                if stock is None or "tokens" not in stock or "tokens" not in data:
                    problems.append(f"{path}-{weights}-{kernels}: no complete stock twin to compare with")
                    continue
                theirs, ours = (GreedyRun(d["tokens"], d["acceptance"]) for d in (stock, data))
                draft_vocab = kernels.startswith("dv")
                label = f"DraftVocab {kernels[2:]}" if draft_vocab else {"gdncore": "GDNCore", "splitkv": "SplitKV"}[kernels]
                problems += [f"{path}-{weights}-{kernels}: {p}" for p in divergences(
                    EVAL_PROMPTS, theirs, ours, label, acceptance_points=None if draft_vocab else 0.02)]
    if not rows:
        problems.append(f"no runs in {out_dir}")
    lines = [f"## The Qwen3.5 architecture through `caovan serve` on CUDA vLLM ({versions.get('date', '?')})", "",
             f"- stack: vLLM {versions.get('vllm')}, torch {versions.get('torch')}, Triton {versions.get('triton')}, "
             f"{versions.get('gpu')}; {len(EVAL_PROMPTS)} prompts x {MAX_TOKENS} greedy tokens per engine", "",
             "| run | ready after | draft acceptance | quantized linear kernel (vLLM's log) |", "|---|---:|---:|---|",
             *rows, "", f"- result: {'PASS' if not problems else 'FAIL'}", *[f"  - {p}" for p in problems], ""]
    return not problems, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start")
    p.add_argument("run", type=lambda s: s if RUN_NAME.fullmatch(s) else parser.error(
        f"RUN {s!r}: expected PATH-WEIGHTS-KERNELS, e.g. native-awq-gdncore or native-fp16-dv512"))
    p.add_argument("model", type=Path)
    p.add_argument("--out-dir", type=Path, required=True)
    p = sub.add_parser("serve")
    p.add_argument("run")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--timeout", type=float, default=540)
    p = sub.add_parser("serve-ready")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--for", dest="for_s", type=float, default=500, help="seconds to wait for daemons to be ready")
    p = sub.add_parser("compare")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--report", type=Path)
    opts = parser.parse_args()
    if opts.command == "start":
        start(opts.run, opts.model, opts.out_dir)
        return 0
    if opts.command == "serve":
        return serve(opts.run, opts.out_dir, opts.timeout)
    if opts.command == "serve-ready":
        return serve_ready(opts.out_dir, opts.for_s)
    ok, report = compare(opts.out_dir)
    print(report)
    if opts.report:
        opts.report.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
