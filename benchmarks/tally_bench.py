"""What DraftVocab's token tally costs the relay: the same streamed chat completions through the daemon with the
tally counting and with it off, alternating, in one run.

The daemon runs in this process (uvicorn in a thread, as the relay tests run it) in front of a synthetic engine (an
aiohttp app on a Unix socket streaming vLLM-shaped chat deltas, so the engine's own time is out and every
difference is the daemon's). Per round and side: sequential requests, each timed to its last byte, and this
process's CPU time per request (client, daemon and synthetic engine together: the same for both sides but for the
relay's hand-over and the counting itself, which is what is compared). Prints a table; --json writes the raw rounds.

    python -m benchmarks.tally_bench [--model DIR] [--requests 200] [--rounds 5] [--chunks 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp.web
import httpx

from caovan_demo.builder import build
from caovan_manager.proxy.upstream import open_upstream
from tests.support.served import ServedDaemon, served_daemon

WORDS = "the of and to in is that for it as with was on be by at this from or have an are not".split()


def events(chunks: int) -> list[bytes]:
    """One reply: `chunks` content deltas of a word or two, as vLLM streams them, then [DONE]."""
    out = [f'data: {json.dumps({"choices": [{"index": 0, "delta": {"content": " " + WORDS[n % len(WORDS)]}}]})}\n\n'
           .encode() for n in range(chunks)]
    return out + [b"data: [DONE]\n\n"]


def start_engine(served: ServedDaemon, socket_path: Path, reply: list[bytes]) -> None:
    async def handle(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        await request.read()
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in reply:
            await response.write(event)
        await response.write_eof()
        return response

    async def listen() -> None:
        app = aiohttp.web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        await aiohttp.web.UnixSite(runner, str(socket_path)).start()

    asyncio.run_coroutine_threadsafe(listen(), served.loop).result(10)
    upstream = served.call(open_upstream, socket_path, served.daemon.settings.proxy, {})
    served.call(served.daemon.primary.gate.open, upstream)


def one_round(url: str, requests: int) -> tuple[list[float], float]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    latencies = []
    cpu = time.process_time()
    with httpx.Client(timeout=30) as client:
        for _ in range(requests):
            started = time.perf_counter()
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                for _ in response.iter_raw():
                    pass
            latencies.append(time.perf_counter() - started)
    return latencies, (time.process_time() - cpu) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="A model folder with tokenizer.json (default: the "
                                                                    "demo model)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=64, help="Content deltas per reply.")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = args.model or build()
    reply = events(args.chunks)
    results: dict[str, list[dict]] = {"on": [], "off": [], "handover": []}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        stack = []
        for side, learn in (("on", {"learn": True}), ("off", {"learn": False}),
                            ("handover", {"learn": True, "learn_queue_bytes": 0})):
            folder = Path(tmp) / side
            context = served_daemon(folder, model=str(model), draft_vocab=learn)
            served = context.__enter__()
            stack.append(context)
            start_engine(served, folder / "engine.sock", reply)
            sides[side] = served
        try:
            for side, served in sides.items():
                one_round(served.url, 20)  # warm-up
            for _ in range(args.rounds):
                for side, served in sides.items():
                    latencies, cpu = one_round(served.url, args.requests)
                    results[side].append({"p50_ms": 1000 * statistics.median(latencies),
                                          "p99_ms": 1000 * sorted(latencies)[int(0.99 * len(latencies)) - 1],
                                          "cpu_ms_per_request": 1000 * cpu})
            counted = sides["on"].daemon.primary.tally.view()
        finally:
            for context in stack:
                context.__exit__(None, None, None)
    print(f"{args.rounds} alternating rounds x {args.requests} sequential streamed chat completions of {args.chunks} "
          f"deltas; counted: {counted.counted_tokens} tokens in {counted.replies} replies, "
          f"{counted.dropped_replies} skipped")
    print("| tally | latency p50 (ms), per round | median p50 | p99 median | CPU per request (ms), median |")
    print("|---|---|---:|---:|---:|")
    for side in ("off", "handover", "on"):
        rows = results[side]
        per_round = ", ".join(f"{row['p50_ms']:.2f}" for row in rows)
        print(f"| {side} | {per_round} | "
              f"{statistics.median(r['p50_ms'] for r in rows):.2f} | {statistics.median(r['p99_ms'] for r in rows):.2f}"
              f" | {statistics.median(r['cpu_ms_per_request'] for r in rows):.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
