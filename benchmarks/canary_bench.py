"""What OutputLock's canary costs on a running engine: one canary run's time, and what a user's request loses when
it arrives while a canary runs.

    python benchmarks/canary_bench.py URL [--runs 5] [--requests 20] [--max-tokens 64] [--seed S] [--json FILE]

A canary run is the daemon's periodic one (caovan_manager.canary.conversation: the built-in prompts, greedy, a
decode then one prefill per generated token, one request at a time), sent straight to the engine at URL, as the
daemon sends it over the engine's socket; `--burst` sends each prompt's prefills together, as the canary after a
start does (when requests are held anyway). The user's
request is a greedy completion of --max-tokens tokens of one of the evaluation prompts; it is timed alone, then sent
at a random moment (seeded; printed) inside a canary run that starts just before it, alternating the two so that
both see the same engine. The periodic canary of the daemon only sends a request when no user request has been in
flight for canary.idle_s; here the user's request arrives anyway, inside a run, which is the worst it can meet: it
shares the engine's batch with one short canary sequence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caovan_manager.canary.conversation import ask  # noqa: E402
from caovan_manager.config import CanarySettings  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402


async def user_request(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> float:
    started = time.perf_counter()
    response = await client.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                            "temperature": 0, "ignore_eos": True})
    response.raise_for_status()
    return time.perf_counter() - started


def quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered), p90, ordered[-1]


async def run(url: str, runs: int, requests: int, max_tokens: int, seed: int, burst: bool) -> dict:
    rng = random.Random(seed)
    settings = CanarySettings()
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        await ask(client, model, settings, "periodic", one_at_a_time=not burst)  # warm: new shapes compile kernels
        await user_request(client, model, EVAL_PROMPTS[0], max_tokens)
        canary_s = []
        for _ in range(runs):
            verdict = await ask(client, model, settings, "periodic", one_at_a_time=not burst)
            if verdict.result != "passed":
                raise SystemExit(f"the canary did not pass on this engine: {verdict.detail}")
            canary_s.append(verdict.duration_s)
        alone, during = [], []
        for index in range(requests):
            prompt = EVAL_PROMPTS[index % len(EVAL_PROMPTS)]
            alone.append(await user_request(client, model, prompt, max_tokens))
            canary = asyncio.create_task(ask(client, model, settings, "periodic", one_at_a_time=not burst))
            await asyncio.sleep(rng.uniform(0, min(canary_s) / 2))
            during.append(await user_request(client, model, prompt, max_tokens))
            await canary
    return {"url": url, "model": model, "seed": seed, "burst": burst, "prompts": len(settings.prompts),
            "canary_max_tokens": settings.max_tokens, "user_max_tokens": max_tokens, "canary_s": canary_s,
            "alone_s": alone, "during_s": during, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--burst", action="store_true", help="each prompt's prefills together (the start canary)")
    args = parser.parse_args()
    result = asyncio.run(run(args.url, args.runs, args.requests, args.max_tokens, args.seed, args.burst))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    c, a, d = quantiles(result["canary_s"]), quantiles(result["alone_s"]), quantiles(result["during_s"])
    print(f"seed {result['seed']}; canary: {result['prompts']} prompts x {result['canary_max_tokens']} tokens, "
          f"{'prefills together' if args.burst else 'one request at a time'}; user request: "
          f"{result['user_max_tokens']} tokens")
    print("| what | median | p90 | max |")
    print("|---|---:|---:|---:|")
    print(f"| one canary run (s) | {c[0]:.3f} | {c[1]:.3f} | {c[2]:.3f} |")
    print(f"| user request alone (s) | {a[0]:.3f} | {a[1]:.3f} | {a[2]:.3f} |")
    print(f"| user request during a canary (s) | {d[0]:.3f} | {d[1]:.3f} | {d[2]:.3f} |")
    print(f"| added (median, p90: s) | {d[0] - a[0]:+.3f} | {d[1] - a[1]:+.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
