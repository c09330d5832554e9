"""The canary's requests, sent to the engine directly (never through the proxy's gate). Per prompt:

1. the prompt, greedy, `ignore_eos` so that every run checks the same number of tokens: the decode path's tokens;
2. for each place i, the prompt and the first i of those tokens as one prompt, greedy, one token, with the
   log-probabilities of the first few candidates: what a prefill picks there, and how far behind it the decode's
   token is. At a start, with requests held, they go out together and vLLM batches them; a periodic or requested
   run sends one request at a time, each after a quiet moment, so that a user's request never queues behind a burst
   of them (an engine serves --max-num-seqs sequences at once; the 2080 Ti profile says 4).

Not `prompt_logprobs` over prompt + tokens in one request, which would be one request instead of many: with MTP on,
vLLM returns corrupted prompt log-probabilities for some requests of Qwen3.5-family models (vllm#53488; seen on
vLLM 0.21 on the H200, the same with stock and GDNCore kernels, docs/verification.md), while the sampled tokens and
their log-probabilities stay right. Every request carries its own `cache_salt`, so no prefill reads a state the
decode path (or another canary request) left in the prefix cache.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from caovan_manager.config import CanarySettings
from caovan_manager.errors import ProbeError

from .verdict import CanaryVerdict, PrefillChoice, PromptResult, Purpose, check_tokens, judge, not_run

# Candidates asked of each prefill: a decode token outside them is further behind than the last of them.
CANDIDATES = 5
# What a canary request can meet that stops it (its verdict is then "not run", with the reason).
CANNOT_ASK = (httpx.HTTPError, ProbeError, ValueError, KeyError, TypeError, IndexError)
# May the next request go out now? (a periodic canary waits for the users' requests to end; False = gave up)
MaySend = Callable[[], Awaitable[bool]]


async def _completion(client: httpx.AsyncClient, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    response = await client.post("/v1/completions", json={**body, "temperature": 0, "cache_salt": secrets.token_hex(8)},
                                 timeout=timeout_s)
    if response.status_code != 200:
        raise ProbeError(f"the engine answered a canary request with HTTP {response.status_code}: "
                         f"{response.text[:300]}")
    choices = response.json()["choices"]
    if not choices:
        raise ProbeError("the engine answered a canary request with no choice")
    return choices[0]


async def decode(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int,
                 timeout_s: float) -> tuple[list[int], list[int]]:
    """(prompt token ids, generated token ids) of a greedy completion."""
    choice = await _completion(client, {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                        "ignore_eos": True, "return_token_ids": True}, timeout_s)
    prompt_ids, generated = choice.get("prompt_token_ids"), choice.get("token_ids")
    if not isinstance(prompt_ids, list) or not isinstance(generated, list):
        raise ProbeError("the engine returned no token ids (`return_token_ids` needs vLLM 0.10.2 or newer)")
    return [int(token) for token in prompt_ids], [int(token) for token in generated]


async def prefill_choice(client: httpx.AsyncClient, model: str, token_ids: Sequence[int],
                         timeout_s: float) -> PrefillChoice:
    """What a greedy prefill of `token_ids` picks next, with its first candidates' log-probabilities."""
    choice = await _completion(client, {"model": model, "prompt": list(token_ids), "max_tokens": 1,
                                        "logprobs": CANDIDATES, "return_tokens_as_token_ids": True,
                                        "return_token_ids": True}, timeout_s)
    logprobs = choice.get("logprobs") or {}
    tops, sampled = logprobs.get("top_logprobs"), choice.get("token_ids")
    if not tops or not sampled:
        raise ProbeError("the engine returned no log-probabilities for a canary prefill")
    # With return_tokens_as_token_ids each candidate is named "token_id:<id>".
    candidates = {int(name.rsplit(":", 1)[1]): float(value) for name, value in tops[0].items()}
    first = int(sampled[0])
    candidates.setdefault(first, float(logprobs["token_logprobs"][0]))
    return PrefillChoice(first, candidates)


async def token_text(client: httpx.AsyncClient, model: str, token: int) -> str:
    """A token as text, for the evidence ("" if the engine cannot say)."""
    try:
        response = await client.post("/detokenize", json={"model": model, "tokens": [token]})
        return str(response.json().get("prompt", "")) if response.status_code == 200 else ""
    except (httpx.HTTPError, ValueError):
        return ""


async def ask(client: httpx.AsyncClient, model: str, settings: CanarySettings, purpose: Purpose,
              may_send: MaySend | None = None, one_at_a_time: bool = False) -> CanaryVerdict:
    """One canary run over the configured prompts; a request that fails ends it as `not_run` with the reason.
    may_send is awaited before each request (with one_at_a_time, before each prefill too)."""
    started = time.monotonic()
    results: list[PromptResult] = []

    def busy() -> CanaryVerdict:
        return not_run(purpose, settings.tie_margin, "the engine stayed busy with users' requests for "
                       f"canary.busy_wait_s = {settings.busy_wait_s:g} s; the next periodic run tries again",
                       time.monotonic() - started)

    try:
        for prompt in settings.prompts:
            if may_send is not None and not await may_send():
                return busy()
            prompt_ids, generated = await decode(client, model, prompt, settings.max_tokens, settings.timeout_s)
            if may_send is not None and not await may_send():
                return busy()
            prefixes = [[*prompt_ids, *generated[:place]] for place in range(len(generated))]
            if one_at_a_time:
                choices = []
                for prefix in prefixes:
                    if may_send is not None and not await may_send():
                        return busy()
                    choices.append(await prefill_choice(client, model, prefix, settings.timeout_s))
            else:
                choices = await asyncio.gather(*(prefill_choice(client, model, prefix, settings.timeout_s)
                                                 for prefix in prefixes))
            results.append(PromptResult(_shown(prompt), tuple(check_tokens(generated, choices))))
    except CANNOT_ASK as exc:
        return not_run(purpose, settings.tie_margin, f"the canary could not ask the engine: "
                       f"{str(exc) or type(exc).__name__}", time.monotonic() - started)
    verdict = judge(results, purpose, settings.tie_margin, time.monotonic() - started)
    if verdict.evidence is not None:
        e = verdict.evidence
        verdict = replace(verdict, evidence=replace(e, expected_text=await token_text(client, model, e.expected),
                                                    got_text=await token_text(client, model, e.got)))
    return verdict


def _shown(prompt: str) -> str:
    return prompt if len(prompt) <= 80 else prompt[:77] + "..."
