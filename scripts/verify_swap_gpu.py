"""Two models on one CUDA GPU, swapped on demand: vLLM's sleep mode against a full stop and start (issue 14).

Run on a machine with CUDA vLLM and this project installed, from the repository root:
    python scripts/verify_swap_gpu.py DEMO_MODEL_DIR --mode sleep|stop [--swaps 4] [--out-dir DIR]
It starts `caovan serve` with a models table of two entries of the demo model, `a` (preloaded) and `b`, both on GPU
0, with `sleep = true` or not, then sends one greedy completion at a time, alternating b, a, b, a...: each one makes
the daemon swap the other model out (asleep or stopped) and this one in (woken or started). For every swap it
records the client's wait for its completion, the daemon's swap duration, the state of the model swapped out and the
GPU memory its processes still hold (NVML), and checks that `a` answers the same greedy text after each swap as
before the first (the weights came back intact). It stops the daemon with Ctrl-C and checks that no engine process
is left. It prints a Markdown report (also DIR/swap-MODE.md) and exits 0 when every check held.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.proxy_bench import free_port, stop_daemon  # noqa: E402
from caovan_kernels import contract  # noqa: E402
from caovan_manager.gpu import gpu_holders, gpu_samples  # noqa: E402
from caovan_manager.models.catalog import without_served_name  # noqa: E402

# Beside the demo's arguments: vLLM 0.21's CUDA build here has no FlashInfer GDN prefill. Each engine takes a
# third of the GPU, so the one starting beside a sleeping one has room whatever the sleeper still holds.
GPU_ARGS = ["--gpu-memory-utilization", "0.3", "--max-num-seqs", "8",
            "--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
PROMPT = "The capital of France is"
ENGINE_STATES_DOWN = {"sleep": "asleep", "stop": "stopped"}


def engine_args() -> list[str]:
    """The demo's vLLM arguments and GPU_ARGS, less the served name (the daemon names each entry's engine)."""
    return [*without_served_name(contract.embedded_engine_args()), *GPU_ARGS]


def config_text(model: Path, state_dir: Path, port: int, sleep: bool) -> str:
    args = json.dumps(engine_args())
    entries = "".join(
        f'[models.{name}]\nmodel = "{model}"\ngpus = [0]\npreload = {str(name == "a").lower()}\n'
        f'sleep = {str(sleep).lower()}\nargs = {args}\n' for name in ("a", "b"))
    # idle_s = 0: a model whose request ended is swapped out for the next one at once (the client is sequential).
    return f'port = {port}\nstate_dir = "{state_dir}"\n[swap]\nidle_s = 0\n{entries}'


def models(url: str) -> dict[str, dict]:
    return {row["name"]: row for row in httpx.get(f"{url}/models", timeout=10).json()["models"]}


def wait_model(daemon: subprocess.Popen, url: str, name: str, states: set[str], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    row: dict = {}
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode}")
        try:
            row = models(url)[name]
        except httpx.HTTPError:
            row = {}
        if row.get("state") in states:
            return row
        if row.get("state") == "failed":
            raise SystemExit(f"model {name} failed: {row.get('reason')}")
        time.sleep(0.5)
    raise SystemExit(f"model {name} not {'/'.join(sorted(states))} within {timeout_s} s: {row}")


def family(pid: int | None) -> set[int]:
    if not pid:
        return set()
    try:
        root = psutil.Process(pid)
        return {root.pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def held_mib(pids: set[int]) -> int:
    """GPU memory (MiB) NVML shows for these processes."""
    return sum(int(h.rsplit("(", 1)[1].split()[0]) for h in gpu_holders(pids))


def complete(url: str, model: str) -> tuple[str, float]:
    started = time.monotonic()
    response = httpx.post(f"{url}/v1/completions", timeout=900, json={
        "model": model, "prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    response.raise_for_status()
    return response.json()["choices"][0]["text"], time.monotonic() - started


def swap_seconds(url: str, model: str) -> float | None:
    """The sum of the daemon's swap durations of `model` (its /metrics histogram); the caller takes differences."""
    page = httpx.get(f"{url}/metrics", timeout=10).text
    total = [line for line in page.splitlines()
             if line.startswith(f'caovan_model_swap_duration_seconds_sum{{model="{model}"}}')]
    return float(total[0].split()[-1]) if total else None


def run(model: Path, mode: str, swaps: int, out_dir: Path) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    lines = [f"# Swap by {'sleep mode' if mode == 'sleep' else 'stop and start'} ({datetime.date.today()})", "",
             f"- GPU: {', '.join(s.name for s in gpu_samples()) or 'none seen by NVML'}",
             f"- engine arguments of each model: {' '.join(engine_args())}"]
    with tempfile.TemporaryDirectory(prefix=f"caovan-swap-{mode}-") as tmp:
        state = Path(tmp)
        port = free_port()
        (state / "swap.toml").write_text(config_text(model, state, port, mode == "sleep"))
        url = f"http://127.0.0.1:{port}"
        log = (state / "daemon.log").open("wb")
        daemon = subprocess.Popen(
            [sys.executable, "-c", "from caovan_manager.cli import main; main()", "serve", "--config",
             str(state / "swap.toml")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("CAOVAN_")})
        seen: set[int] = set()
        try:
            started = time.monotonic()
            row = wait_model(daemon, url, "a", {"ready"}, 600)
            seen |= family(row["pid"])
            lines.append(f"- a ready (cold start, preloaded) in {time.monotonic() - started:.0f} s; its processes "
                         f"hold {held_mib(family(row['pid']))} MiB")
            reference, _ = complete(url, "a")
            lines += ["", "| swap | in | its wait (s) | daemon's swap (s) | out | out's state | out's GPU memory "
                          "before -> after (MiB) | GPU used after (GiB) | a's text as before |",
                      "|---:|---|---:|---:|---|---|---:|---:|---|"]
            for step in range(1, swaps + 1):
                incoming, outgoing = ("b", "a") if step % 2 else ("a", "b")
                before_rows = models(url)
                out_pids = family(before_rows[outgoing]["pid"])
                before_mib = held_mib(out_pids)
                swap_before = swap_seconds(url, incoming) or 0.0
                text, waited = complete(url, incoming)
                rows = models(url)
                seen |= family(rows[incoming]["pid"]) | out_pids
                out_row = wait_model(daemon, url, outgoing, {ENGINE_STATES_DOWN[mode], "stopped"}, 60)
                after_mib = held_mib(out_pids)
                swap_s = (swap_seconds(url, incoming) or 0.0) - swap_before
                used = sum(s.memory_used_bytes for s in gpu_samples()) / 2**30
                same = "-" if incoming != "a" else ("yes" if text == reference else "NO")
                lines.append(f"| {step} | {incoming} | {waited:.1f} | {swap_s:.1f} | {outgoing} | "
                             f"{out_row['state']} | {before_mib} -> {after_mib} | {used:.1f} | {same} |")
                if out_row["state"] != ENGINE_STATES_DOWN[mode]:
                    problems.append(f"swap {step}: {outgoing} is {out_row['state']} ({out_row['reason']}), expected "
                                    f"{ENGINE_STATES_DOWN[mode]}")
                if same == "NO":
                    problems.append(f"swap {step}: a answered {text!r} where it answered {reference!r} before")
                if mode == "stop" and after_mib:
                    problems.append(f"swap {step}: {outgoing}'s stopped processes still hold {after_mib} MiB")
                if mode == "sleep" and before_mib and after_mib >= before_mib / 2:
                    problems.append(f"swap {step}: {outgoing} asleep still holds {after_mib} of {before_mib} MiB")
            lines.append(f"- swaps counted by the daemon: "
                         f"{ {name: row['swaps'] for name, row in models(url).items()} }")
        finally:
            if problem := stop_daemon(daemon, 180):
                problems.append(problem)
            log.close()
            (out_dir / f"daemon-{mode}.log").write_bytes((state / "daemon.log").read_bytes())
        deadline = time.monotonic() + 15
        while (alive := [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        lines.append(f"- after Ctrl-C: engine processes left: {alive or 'none'}; their GPU memory: "
                     f"{held_mib(set(alive))} MiB")
        if alive:
            problems.append(f"engine processes left after the daemon stopped: {alive}")
    return lines, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--mode", choices=("sleep", "stop"), required=True)
    parser.add_argument("--swaps", type=int, default=4)
    parser.add_argument("--out-dir", type=Path, default=Path("."))
    opts = parser.parse_args()
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    lines, problems = run(opts.model, opts.mode, opts.swaps, opts.out_dir)
    lines += ["", f"Result: {'PASS' if not problems else 'FAIL'}", *(f"- {p}" for p in problems)]
    report = "\n".join(lines) + "\n"
    (opts.out_dir / f"swap-{opts.mode}.md").write_text(report)
    print(report)
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
