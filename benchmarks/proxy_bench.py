"""What the daemon's proxy costs: the same load sent directly to the engine and through the daemon, in one run.

Starts `caovan serve` (embedded default unless --model), then for each concurrency (1, 16, 64 streams) sends
streamed chat completions to the engine's own port and to the daemon's /v1, alternating, and reports per path:
time to first token (p50/p99), request latency (p50/p99), tokens/s, and the daemon/direct ratios. Because a
streamed completion's latency is dominated by the engine, the proxy hop itself is also measured alone: a one-token
completion, direct and proxied, many times (p50/p99 added latency).

    python benchmarks/proxy_bench.py [--concurrency 1,16,64] [--rounds 3] [--requests 2] [--max-tokens 32] [--json F]
                                     [--routed]

--routed serves the model as the one entry of a models table: the daemon reads each request's model to route it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from caovan_manager.models.catalog import without_served_name

PROMPTS = ["Hello!", "Count from one to ten.", "Name five animals.", "Tell me a joke."]
SERVED_NAME = "caovan-demo"  # the model the load's requests name (the embedded default's served name)


@dataclass
class PathResult:
    path: str
    concurrency: int
    requests: int
    errors: int
    tokens: int
    wall_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def one_stream(client: httpx.AsyncClient, url: str, headers: dict, prompt: str, max_tokens: int
                     ) -> tuple[float, float, int]:
    """(ttft_s, latency_s, generated tokens) of one streamed chat completion."""
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    tokens = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices")
            if choices and choices[0].get("delta", {}).get("content"):
                first = first or time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    return (first or end) - started, end - started, tokens


@dataclass
class Samples:
    ttfts: list[float]
    latencies: list[float]
    tokens: int = 0
    errors: int = 0
    wall_s: float = 0.0

    def result(self, name: str, concurrency: int) -> PathResult:
        return PathResult(name, concurrency, len(self.latencies) + self.errors, self.errors, self.tokens, self.wall_s,
                          percentile(self.ttfts, 0.5) * 1e3, percentile(self.ttfts, 0.99) * 1e3,
                          percentile(self.latencies, 0.5) * 1e3, percentile(self.latencies, 0.99) * 1e3)


def client_for(address: str, **options: object) -> tuple[httpx.AsyncClient, str]:
    """A client and base URL for an address: the daemon's http:// URL, or the engine's `unix:<socket>` (/status's
    engine.address: the engine listens on a Unix socket only)."""
    if address.startswith("unix:"):
        transport = httpx.AsyncHTTPTransport(uds=address[len("unix:"):], limits=options.pop("limits", None)
                                             or httpx.Limits())
        return httpx.AsyncClient(transport=transport, **options), "http://localhost"
    return httpx.AsyncClient(**options), address


async def run_load(address: str, headers: dict, concurrency: int, requests: int, max_tokens: int,
                   into: Samples) -> None:
    """One round: `concurrency` streams of `requests` completions each; adds to `into`."""
    ttfts, latencies = into.ttfts, into.latencies
    tokens = errors = 0
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    client, url = client_for(address, timeout=httpx.Timeout(600, connect=10), limits=limits)
    async with client:
        async def stream_worker(index: int) -> None:
            nonlocal tokens, errors
            for turn in range(requests):
                try:
                    ttft, latency, generated = await one_stream(client, url, headers,
                                                             PROMPTS[(index + turn) % len(PROMPTS)], max_tokens)
                except httpx.HTTPError:
                    errors += 1
                    continue
                ttfts.append(ttft)
                latencies.append(latency)
                tokens += generated

        started = time.perf_counter()
        await asyncio.gather(*(stream_worker(i) for i in range(concurrency)))
        into.wall_s += time.perf_counter() - started
    into.tokens += tokens
    into.errors += errors


async def hop_latency(direct: str, daemon: str, headers: dict, samples: int) -> dict[str, float]:
    """A one-token completion direct and through the daemon, interleaved: the proxy hop alone. Its body names the
    model, which is what routing reads (with a models table the daemon answers GET /v1/models itself, so a GET
    would measure no hop there)."""
    body = {"model": SERVED_NAME, "prompt": "Hi", "max_tokens": 1, "temperature": 0}
    times = {"direct": [], "daemon": []}
    (direct_client, direct_url), (daemon_client, daemon_url) = client_for(direct, timeout=30), client_for(
        daemon, timeout=30)
    async with direct_client, daemon_client:
        paths = (("direct", direct_client, direct_url, {}), ("daemon", daemon_client, daemon_url, headers))
        for _ in range(20):  # warm both connection pools
            for _, client, url, hdrs in paths:
                await client.post(f"{url}/v1/completions", json=body, headers=hdrs)
        for _ in range(samples):
            statuses = []
            for name, client, url, hdrs in paths:
                started = time.perf_counter()
                statuses.append((await client.post(f"{url}/v1/completions", json=body, headers=hdrs)).status_code)
                times[name].append(time.perf_counter() - started)
            if statuses[0] != statuses[1] or statuses[0] >= 400:
                raise SystemExit(f"POST /v1/completions: direct answered {statuses[0]}, the daemon {statuses[1]}")
    added = [d - s for d, s in zip(times["daemon"], times["direct"])]
    return {"direct_p50_ms": percentile(times["direct"], 0.5) * 1e3,
            "daemon_p50_ms": percentile(times["daemon"], 0.5) * 1e3,
            "added_p50_ms": (percentile(times["daemon"], 0.5) - percentile(times["direct"], 0.5)) * 1e3,
            "added_p99_ms": (percentile(times["daemon"], 0.99) - percentile(times["direct"], 0.99)) * 1e3,
            "added_pairwise_median_ms": statistics.median(added) * 1e3, "samples": samples,
            "path": "POST /v1/completions, one token"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_daemon(model: str | None, state_dir: Path, engine_args: Sequence[str] = (),
                 routed: bool = False) -> tuple[subprocess.Popen, str]:
    """`caovan serve`; routed: the same model as the one entry of a models table, so every request is routed by the
    model its body names."""
    port = free_port()
    config = state_dir / "bench.toml"
    text = f'port = {port}\nstate_dir = "{state_dir}"\n[proxy]\nqueue_size = 1024\n'
    if routed:
        # The entry's name is its served name; a JSON list of strings is a TOML array.
        args = without_served_name(list(engine_args))
        text += (f'[models.{SERVED_NAME}]\npreload = true\nargs = {json.dumps(args)}\n'
                 + (f'model = "{model}"\n' if model else ""))
        model, engine_args = None, ()
    config.write_text(text)
    command = [sys.executable, "-c", "from caovan_manager.cli import main; main()", "serve",
               *([model] if model else []), "--config", str(config), *(["--", *engine_args] if engine_args else [])]
    log = (state_dir / "daemon.log").open("wb")
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env={k: v for k, v in os.environ.items() if not k.startswith("CAOVAN_")})
    return daemon, f"http://127.0.0.1:{port}"


def stop_daemon(daemon: subprocess.Popen, timeout_s: float = 120) -> str | None:
    """Ctrl-C, as a user stops it; past the timeout its process group is killed. Returns the problem, if any."""
    daemon.send_signal(signal.SIGINT)
    try:
        daemon.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        return f"the daemon did not stop within {timeout_s:g} s of Ctrl-C"
    return None


def wait_ready(daemon: subprocess.Popen, url: str, timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode}")
        try:
            status = httpx.get(f"{url}/status", timeout=5).json()
            if status["state"] == "ready":
                return status
            if status["state"] == "failed":
                raise SystemExit(f"the engine failed to start: {status['last_error']}")
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"the engine was not ready within {timeout_s} s")


def table(results: list[tuple[PathResult, PathResult]], hop: dict[str, float]) -> str:
    lines = ["| streams | path | TTFT p50 / p99 (ms) | latency p50 / p99 (ms) | tokens/s | errors |",
             "|---:|---|---:|---:|---:|---:|"]
    for direct, proxied in results:
        for r in (direct, proxied):
            lines.append(f"| {r.concurrency} | {r.path} | {r.ttft_p50_ms:.1f} / {r.ttft_p99_ms:.1f} | "
                         f"{r.latency_p50_ms:.1f} / {r.latency_p99_ms:.1f} | {r.tokens_per_s:.1f} | {r.errors} |")
    lines += ["", "| streams | added TTFT p50 (ms) | added latency p50 / p99 (ms) | throughput daemon/direct |",
              "|---:|---:|---:|---:|"]
    for direct, proxied in results:
        ratio = proxied.tokens_per_s / direct.tokens_per_s if direct.tokens_per_s else float("nan")
        lines.append(f"| {direct.concurrency} | {proxied.ttft_p50_ms - direct.ttft_p50_ms:+.1f} | "
                     f"{proxied.latency_p50_ms - direct.latency_p50_ms:+.1f} / "
                     f"{proxied.latency_p99_ms - direct.latency_p99_ms:+.1f} | {ratio:.3f} |")
    lines += ["", f"Proxy hop alone ({hop['path']}, {hop['samples']} interleaved pairs): direct p50 "
                  f"{hop['direct_p50_ms']:.2f} ms, through the daemon p50 {hop['daemon_p50_ms']:.2f} ms; added p50 "
                  f"{hop['added_p50_ms']:.2f} ms, added p99 {hop['added_p99_ms']:.2f} ms, median of pairwise "
                  f"differences {hop['added_pairwise_median_ms']:.2f} ms."]
    return "\n".join(lines)


async def bench(direct: str, daemon: str, args: argparse.Namespace) -> tuple[list, dict]:
    hop = await hop_latency(direct, daemon, {}, args.hop_samples)
    results = []
    for concurrency in args.concurrency:
        # One untimed round per path first: a new batch size costs the engine a warm-up (on a GPU, CUDA-graph and
        # kernel choices) that would otherwise fall on whichever path the first timed round sends.
        for url in (direct, daemon):
            await run_load(url, {}, concurrency, 1, args.max_tokens, Samples([], []))
        # Alternate the two paths round by round, and which goes first, so a noisy neighbour on the machine (or
        # the engine warming up) hits both alike.
        samples = {"direct": Samples([], []), "daemon": Samples([], [])}
        paths = [("direct", direct), ("daemon", daemon)]
        for round_index in range(args.rounds):
            for name, url in paths if round_index % 2 == 0 else paths[::-1]:
                await run_load(url, {}, concurrency, args.requests, args.max_tokens, samples[name])
        first, second = samples["direct"].result("direct", concurrency), samples["daemon"].result("daemon", concurrency)
        results.append((first, second))
        print(f"{concurrency} streams: direct {first.tokens_per_s:.1f} tok/s, daemon {second.tokens_per_s:.1f} "
              f"tok/s", file=sys.stderr)
    return results, hop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="Model for `caovan serve` (default: the embedded demo).")
    parser.add_argument("--concurrency", default="1,16,64", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests", type=int, default=2, help="Completions per stream and round.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating direct/daemon rounds per concurrency.")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--hop-samples", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="Also write the raw results here.")
    parser.add_argument("--routed", action="store_true", help="Serve the model as a models table's one entry, so "
                                                             "the daemon routes each request by its model.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="caovan-bench-") as tmp:
        daemon, url = start_daemon(args.model, Path(tmp), routed=args.routed)
        try:
            status = wait_ready(daemon, url)
            results, hop = asyncio.run(bench(status["engine"]["address"], url, args))
        finally:
            stop_daemon(daemon)
    print(table(results, hop))
    if args.json:
        args.json.write_text(json.dumps({"hop": hop, "load": [[asdict(d), asdict(p)] for d, p in results]}, indent=2))


if __name__ == "__main__":
    main()
