"""OutputLock's canary against a running vLLM engine: its verdict over many prompts, and every margin it saw.

    python scripts/verify_canary.py start LABEL MODEL_DIR --out-dir DIR [--plugin-site SITE]
    python scripts/verify_canary.py wait DIR --for S [--builtin-only]
    python scripts/verify_canary.py check URL --label LABEL --out FILE [--random N] [--seed S] [--max-tokens T]
                                    [--builtin-only] [--prompt-logprobs]
    python scripts/verify_canary.py report FILE...

`check` runs the daemon's own canary (caovan_manager.canary.conversation, the configured tie margin) over the
built-in prompts, the ten evaluation prompts the demo models never saw in training, and N runs of unrelated words
drawn with the seed (printed; give it again to replay). Each prompt is its own canary run, so the file holds each
one's verdict and every non-zero margin: the distribution a tie margin is chosen from. `report` prints one row per
file. For correct engines (stock kernels, GDNCore) every verdict must be `passed`; for a build that corrupts the GDN
state, `failed`. `check` exits 1 when a correct engine's file (label without `broken`) has a failure, or a `broken`
one has none.

`start` (CUDA vLLM, this project installed as a package) launches one engine in its own session and returns, so
several start side by side on one GPU. LABEL is PATH-KERNELS[-broken][-nomtp]: PATH native or proxy
(CAOVAN_TURING_PROXY=triton: the sm_75 code path), KERNELS stock (caovan_mode=off) or gdncore (force); `-broken`
with --plugin-site runs another build of the plugin (one whose GDN state writes are skipped) from that folder,
`-nomtp` runs without MTP. The engine gets the Qwen3.5 demo serving arguments of scripts/verify_qwen3_5_cuda.py (the
27B's 2x 2080 Ti profile, MTP=3) with CUDA graphs on, also on the proxy. `wait` checks every started engine of DIR
as it becomes ready (seed 1, 30 random prompts, and the same against `prompt_logprobs` into LABEL-plp.json, to show
why the canary does not use them; `--builtin-only`: the built-in prompts alone, as the daemon runs them) and writes
DIR/LABEL.json; engines still starting are left for the next call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caovan_manager.canary import conversation  # noqa: E402
from caovan_manager.canary.conversation import ask  # noqa: E402
from caovan_manager.canary.verdict import PrefillChoice, PromptResult, check_tokens, judge  # noqa: E402
from caovan_manager.config import CANARY_PROMPTS, CanarySettings  # noqa: E402
from scripts.verify_qwen3_5_cuda import KERNELS, PINNED, SERVED, turing_profile_args  # noqa: E402
from tests.support.engine import free_port  # noqa: E402
from tests.support.prompts import EVAL_PROMPTS  # noqa: E402

WORDS = ("the of and to in is was for on that with as by at from his her they this which one two three red blue "
         "river stone night city music paper window garden winter coffee engine signal forest silver bridge letter "
         "market doctor").split()


async def prompt_logprobs_choices(client: httpx.AsyncClient, model: str, prompt_ids: list[int],
                                  generated: list[int]) -> list[PrefillChoice]:
    """The one-request way the canary does not use: prompt_logprobs over prompt + generated (vllm#53488 with MTP).
    For --prompt-logprobs, to show that difference on an engine."""
    response = await client.post("/v1/completions", json={"model": model, "prompt": [*prompt_ids, *generated],
                                                           "max_tokens": 1, "temperature": 0, "prompt_logprobs": 5})
    rows = response.json()["choices"][0]["prompt_logprobs"][len(prompt_ids):]
    choices = []
    for row in rows:
        ranked = {int(token): entry for token, entry in row.items()}
        first = min(ranked, key=lambda token: ranked[token]["rank"])
        choices.append(PrefillChoice(first, {token: entry["logprob"] for token, entry in ranked.items()}))
    return choices


def random_prompts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(4, 40))) for _ in range(count)]


async def check(url: str, label: str, out: Path, count: int, seed: int, max_tokens: int, model: str | None,
                use_prompt_logprobs: bool = False, builtin_only: bool = False) -> int:
    prompts = [("built-in", p) for p in CANARY_PROMPTS]
    if not builtin_only:
        prompts += [("eval", p) for p in EVAL_PROMPTS] + [("random", p) for p in random_prompts(seed, count)]
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        if model is None:
            model = (await client.get("/v1/models")).json()["data"][0]["id"]
        for kind, prompt in prompts:
            settings = CanarySettings(prompts=[prompt], max_tokens=max_tokens)
            if use_prompt_logprobs:
                prompt_ids, generated = await conversation.decode(client, model, prompt, max_tokens, 600)
                choices = await prompt_logprobs_choices(client, model, prompt_ids, generated)
                verdict = judge([PromptResult(prompt, tuple(check_tokens(generated, choices)))], "on_demand",
                                settings.tie_margin, 0.0)
            else:
                verdict = await ask(client, model, settings, "on_demand")
            rows.append({"kind": kind, **verdict.as_dict(), "margins": list(verdict.margins)})
    failed = [row for row in rows if row["result"] == "failed"]
    not_run = [row for row in rows if row["result"] == "not_run"]
    summary = {"label": label, "url": url, "model": model, "seed": seed, "max_tokens": max_tokens,
               "tie_margin": CanarySettings().tie_margin, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "prompts": len(rows), "failed_prompts": len(failed), "not_run_prompts": len(not_run),
               "tokens": sum(row["tokens"] for row in rows), "exact": sum(row["exact"] for row in rows),
               "ties": sum(row["ties"] for row in rows), "disagreements": sum(row["disagreements"] for row in rows),
               "margins": sorted(m for row in rows for m in row["margins"]), "rows": rows}
    out.write_text(json.dumps(summary, indent=1))
    print(f"{label}: seed {seed}, {len(rows)} prompts, {summary['tokens']} tokens: {summary['exact']} exact, "
          f"{summary['ties']} ties, {summary['disagreements']} disagreeing; {len(failed)} prompts failed, "
          f"{len(not_run)} not run; non-zero margins: {[round(m, 4) for m in summary['margins']][:20]}")
    for row in failed[:3]:
        print(f"  evidence: {row['evidence']}")
    return 0 if (bool(failed) == ("broken" in label)) and not not_run else 1


def start(label: str, model: Path, out_dir: Path, plugin_site: Path | None) -> None:
    path, kernels, *rest = label.split("-")
    broken, no_mtp = "broken" in rest, "nomtp" in rest
    if broken and plugin_site is None:
        raise SystemExit(f"{label}: a broken run needs --plugin-site")
    out_dir.mkdir(parents=True, exist_ok=True)
    profile_args, _ = turing_profile_args(on_proxy=path == "proxy")
    if no_mtp:
        at = profile_args.index("--speculative-config")
        profile_args = profile_args[:at] + profile_args[at + 2:]
    extra = {**KERNELS[kernels], "gdn_prefill_backend": "triton"}  # vLLM 0.21's CUDA build: no FlashInfer GDN
    port = free_port()
    command = [sys.executable, "-m", "caovan_kernels.serve", str(model.resolve()), "--host", "127.0.0.1", "--port",
               str(port), "--served-model-name", SERVED, *profile_args, *PINNED, "--additional-config",
               json.dumps(extra)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAOVAN_") and k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(out_dir / f"triton-cache-{label}")
    if path == "proxy":
        env["CAOVAN_TURING_PROXY"] = "triton"
    if broken:  # that build first on the path, and a working directory where no checkout shadows it
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_site), env.get("PYTHONPATH")]))
    workdir = out_dir / f"work-{label}"
    workdir.mkdir(exist_ok=True)
    process = subprocess.Popen(command, stdout=(out_dir / f"{label}.log").open("wb"), stderr=subprocess.STDOUT,
                               env=env, cwd=workdir, start_new_session=True)
    (out_dir / f"{label}.start.json").write_text(json.dumps({"pid": process.pid, "port": port, "started": time.time(),
                                                             "command": command}))
    print(f"{label}: engine pid {process.pid} on port {port}")


def wait(out_dir: Path, for_s: float, builtin_only: bool) -> int:
    """Check each started engine once it answers /health; leave the others for the next call."""
    deadline = time.monotonic() + for_s
    pending = {p.name.removesuffix(".start.json"): json.loads(p.read_text())
               for p in out_dir.glob("*.start.json") if not (out_dir / p.name.replace(".start", "")).exists()}
    while pending and time.monotonic() < deadline:
        for label, meta in list(pending.items()):
            url = f"http://127.0.0.1:{meta['port']}"
            try:
                healthy = httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy:
                ready_s = time.time() - meta["started"]
                print(f"{label}: ready {ready_s:.0f} s after its start", flush=True)
                asyncio.run(check(url, label, out_dir / f"{label}.json", 30, 1, CanarySettings().max_tokens, None,
                                  builtin_only=builtin_only))
                if not builtin_only:
                    asyncio.run(check(url, label + "-plp", out_dir / f"{label}-plp.json", 30, 1,
                                      CanarySettings().max_tokens, None, use_prompt_logprobs=True))
                del pending[label]
        time.sleep(5)
    for label in pending:
        print(f"{label}: not ready yet")
    return 0


def report(files: list[Path]) -> int:
    print("| engine | prompts | tokens | exact | ties | disagreeing | prompts failed | not run | largest non-zero "
          "margin of a correct token | verdict |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    bad = 0
    for path in files:
        s = json.loads(path.read_text())
        broken = "broken" in s["label"]
        ties = [m for row in s["rows"] if row["result"] == "passed" for m in row["margins"]]
        ok = (s["failed_prompts"] > 0) == broken and s["not_run_prompts"] == 0
        bad += not ok
        verdict = ("caught" if s["failed_prompts"] else "MISSED") if broken else (
            "no false alarm" if not s["failed_prompts"] else "FALSE ALARM")
        print(f"| {s['label']} | {s['prompts']} | {s['tokens']} | {s['exact']} | {s['ties']} | {s['disagreements']} | "
              f"{s['failed_prompts']} | {s['not_run_prompts']} | {max(ties, default=0):.4g} | {verdict} |")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("url")
    c.add_argument("--label", required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--random", type=int, default=20)
    c.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    c.add_argument("--max-tokens", type=int, default=CanarySettings().max_tokens)
    c.add_argument("--model")
    c.add_argument("--builtin-only", action="store_true", help="only the built-in prompts (the daemon's canary)")
    c.add_argument("--prompt-logprobs", action="store_true",
                   help="compare against prompt_logprobs over prompt + tokens (one request) instead: a diagnosis")
    r = sub.add_parser("report")
    r.add_argument("files", type=Path, nargs="+")
    s = sub.add_parser("start")
    s.add_argument("label")
    s.add_argument("model", type=Path)
    s.add_argument("--out-dir", type=Path, required=True)
    s.add_argument("--plugin-site", type=Path)
    w = sub.add_parser("wait")
    w.add_argument("out_dir", type=Path)
    w.add_argument("--for", dest="for_s", type=float, default=500)
    w.add_argument("--builtin-only", action="store_true", help="only the built-in prompts (the daemon's canary)")
    args = parser.parse_args()
    if args.command == "start":
        start(args.label, args.model, args.out_dir, args.plugin_site)
        return 0
    if args.command == "wait":
        return wait(args.out_dir, args.for_s, args.builtin_only)
    if args.command == "check":
        return asyncio.run(check(args.url, args.label, args.out, args.random, args.seed, args.max_tokens, args.model,
                                 args.prompt_logprobs, args.builtin_only))
    return report(args.files)


if __name__ == "__main__":
    sys.exit(main())
