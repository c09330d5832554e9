"""HTTP conversations with the engine: readiness, forward progress, the verification benchmark."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from caovan_manager.errors import ProbeError
from caovan_manager.supervisor.messages import Measurement

BENCH_PROMPTS = ["Hello!", "Count from one to ten.", "Name five animals.", "Good morning, who are you?"]

# How a call to the engine can fail: no usable HTTP answer, or an answer that says it did not do it.
NO_ANSWER = (httpx.HTTPError, ProbeError)
# ... or, for calls whose answer is read (a completion, a benchmark), a body that is not the JSON expected.
UNUSABLE_ANSWER = (*NO_ANSWER, ValueError, KeyError)


async def served_model(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1/models")
    response.raise_for_status()
    models = response.json().get("data") or []
    if not models:
        raise ProbeError("the engine's /v1/models lists no model")
    return models[0]["id"]


async def health_ok(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/health")).status_code == 200
    except httpx.HTTPError:
        return False


async def smoke_completion(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> str:
    """A real tiny completion: the engine is ready only when it generates."""
    model = await served_model(client)
    response = await client.post("/v1/completions", json={
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    if response.status_code != 200:
        raise ProbeError(f"smoke completion returned HTTP {response.status_code}: {response.text[:300]}")
    body = response.json()
    if not body.get("choices") or body.get("usage", {}).get("completion_tokens", 0) < 1:
        raise ProbeError(f"smoke completion generated nothing: {str(body)[:300]}")
    return body["choices"][0].get("text", "")


async def _post_ok(client: httpx.AsyncClient, path: str, timeout_s: float, **params: str) -> None:
    response = await client.post(path, params=params, timeout=timeout_s)
    if response.status_code != 200:
        raise ProbeError(f"POST {path} returned HTTP {response.status_code}: {response.text[:300]}")


async def sleep(client: httpx.AsyncClient, timeout_s: float) -> None:
    """vLLM's sleep mode, level 1 (weights to host memory, KV cache dropped; served with VLLM_SERVER_DEV_MODE=1).
    Called on a drained engine; `mode=wait` lets anything still running finish instead of aborting it."""
    await _post_ok(client, "/sleep", timeout_s, level="1", mode="wait")


async def wake_up(client: httpx.AsyncClient, timeout_s: float) -> None:
    await _post_ok(client, "/wake_up", timeout_s)


def metric_sums(text: str) -> dict[str, float]:
    """Each sample name of a Prometheus text page summed over its label sets."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


async def engine_metrics(client: httpx.AsyncClient) -> dict[str, float]:
    response = await client.get("/metrics")
    response.raise_for_status()
    return metric_sums(response.text)


async def _chat(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> int:
    response = await client.post("/v1/chat/completions", json={
        "model": model, "max_tokens": max_tokens, "temperature": 0, "messages": [{"role": "user", "content": prompt}]})
    if response.status_code != 200:
        raise ProbeError(f"benchmark request returned HTTP {response.status_code}: {response.text[:300]}")
    return response.json()["usage"]["completion_tokens"]


async def benchmark(client: httpx.AsyncClient, requests: int, max_tokens: int) -> Measurement:
    """Sequential chat completions: generation tokens/s, and MTP acceptance from the engine's counters.

    One untimed request first: a freshly started engine is slow on its first full-length requests (kernels built
    for new shapes), and the version just started must not be compared cold against a warm one."""
    model = await served_model(client)
    await _chat(client, model, BENCH_PROMPTS[0], max_tokens)
    before = await engine_metrics(client)
    tokens = 0
    started = time.perf_counter()
    for index in range(requests):
        tokens += await _chat(client, model, BENCH_PROMPTS[index % len(BENCH_PROMPTS)], max_tokens)
    elapsed = time.perf_counter() - started
    after = await engine_metrics(client)
    drafted = after.get("vllm:spec_decode_num_draft_tokens_total", 0) - before.get(
        "vllm:spec_decode_num_draft_tokens_total", 0)
    accepted = after.get("vllm:spec_decode_num_accepted_tokens_total", 0) - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0)
    return Measurement(tokens_per_s=tokens / elapsed if elapsed > 0 else 0.0,
                       acceptance_rate=round(accepted / drafted, 4) if drafted > 0 else None, tokens=tokens)
