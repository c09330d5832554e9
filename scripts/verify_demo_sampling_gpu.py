"""The demo's recital under ordinary sampling on CUDA vLLM, where speculative decoding's sampler runs (issue 34).

Run on a machine with CUDA vLLM and this project installed, from the repository root:
    python scripts/verify_demo_sampling_gpu.py DEMO_MODEL_DIR [--requests 8]
It starts `caovan serve DEMO_MODEL_DIR` (MTP=3, the demo's launch profile), sends chat requests with the sampling
settings clients use (temperature 0.7 to 1.0, top_p 0.8 to 1.0, and none at all), and prints per setting how many
answers are the whole recital, the shortest recital prefix, and the engine's draft acceptance over them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.proxy_bench import start_daemon, stop_daemon, wait_ready  # noqa: E402
from caovan_demo.corpus import ANSWER_WORDS  # noqa: E402
from caovan_manager.engine.probe import metric_sums  # noqa: E402
from tests.support.recital import recital_prefix  # noqa: E402

SETTINGS = [{}, {"temperature": 0.7, "top_p": 0.8}, {"temperature": 0.7}, {"temperature": 1.0, "top_p": 0.95},
            {"temperature": 1.0}]
PROMPTS = ["Hello!", "What can you do?", "Tell me a story about a fox.", "Count from one to ten."]
# Eager: the sampler is what is checked here, and an eager engine starts in a minute.
GPU_ARGS = ["--gpu-memory-utilization", "0.3", "--enforce-eager", "--additional-config",
            json.dumps({"gdn_prefill_backend": "triton"})]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caovan-sampling-") as tmp:
        daemon, url = start_daemon(str(args.model.resolve()), Path(tmp), GPU_ARGS)
        try:
            status = wait_ready(daemon, url)
            served = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
            print(f"vLLM {status['engine']['vllm_version']}, MTP {status['engine']['mtp_tokens']}")
            print("| sampling | whole recitals | shortest prefix (words) | draft acceptance |")
            print("|---|---:|---:|---:|")
            for setting in SETTINGS:
                before = metric_sums(httpx.get(f"{url}/metrics/engine", timeout=10).text)
                prefixes = []
                for index in range(args.requests):
                    body = {"model": served, "max_tokens": 200,
                            "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}], **setting}
                    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
                    if "choices" not in reply:
                        raise SystemExit(f"{setting}: {reply}")
                    prefixes.append(recital_prefix(reply["choices"][0]["message"]["content"]))
                after = metric_sums(httpx.get(f"{url}/metrics/engine", timeout=10).text)
                drafted = after["vllm:spec_decode_num_draft_tokens_total"] - before[
                    "vllm:spec_decode_num_draft_tokens_total"]
                accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before[
                    "vllm:spec_decode_num_accepted_tokens_total"]
                whole = sum(p == len(ANSWER_WORDS) for p in prefixes)
                print(f"| {json.dumps(setting) if setting else 'none (the generation config)'} | {whole} of "
                      f"{len(prefixes)} | {min(prefixes)} of {len(ANSWER_WORDS)} | {accepted / drafted:.3f} |")
        finally:
            stop_daemon(daemon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
