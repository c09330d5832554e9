"""Which requests an engine that decodes greedily only refuses (the relay's side of the `sampling` decision)."""

from __future__ import annotations

import json

import pytest

from caovan_kernels.contract import GREEDY_DEFAULTS, GREEDY_ONLY, SAMPLING_DECISION
from caovan_manager.proxy.sampling import greedy_only_reason, sampling_refusal

REASON = "no Triton CPU backend"


def test_the_reason_comes_from_the_launch_decisions():
    assert greedy_only_reason([{"name": "dtype", "value": "bfloat16", "reason": "x"}]) is None
    assert greedy_only_reason([{"name": SAMPLING_DECISION, "value": GREEDY_ONLY, "reason": REASON}]) == REASON


def test_only_requests_that_sample_are_refused():
    def refused(label: str, document: object) -> bool:
        return sampling_refusal(label, json.dumps(document).encode(), REASON) is not None

    chat = "/v1/chat/completions"
    # vLLM's request models read a numeric string or a boolean as a number (pydantic's lax mode): those sample too.
    for sampling in ({"temperature": 0.7}, {"temperature": 1}, {"temperature": 1.0, "top_k": 20},
                     {"temperature": 2e-5, "top_p": 0.9}, {"temperature": "0.7", "top_k": 5}, {"temperature": True},
                     {"temperature": " 1.5 "}, {"temperature": float("inf")}, {"temperature": 1e-6}):
        assert refused(chat, {"model": "m", **sampling}), sampling
        assert refused("/v1/completions", {"prompt": "x", **sampling}), sampling
    for greedy in ({}, {"temperature": 0}, {"temperature": 0.0, "top_k": 20}, {"temperature": None},
                   {"temperature": False}, {"temperature": "0"}, {"top_p": 0.5}):
        assert not refused(chat, {"model": "m", **greedy}), greedy
    # NaN is not below the greedy threshold, so vLLM samples with it; Python's JSON reader (the engine's) accepts it.
    assert sampling_refusal(chat, b'{"temperature": NaN, "top_k": 5}', REASON) is not None
    # What vLLM cannot read as a number it refuses itself, with a 400 that names the field.
    for unreadable in ({"temperature": "warm"}, {"temperature": [0.7]}, {"temperature": {"value": 0.7}}):
        assert not refused(chat, {"model": "m", **unreadable}), unreadable
    assert not refused("/v1/embeddings", {"temperature": 0.7})  # nothing is sampled there
    assert sampling_refusal(chat, b"not json", REASON) is None  # the engine answers that itself
    # Too deep for this reader, maybe not for the engine's (a stack of another depth): it cannot be checked.
    deep = b'{"temperature": 0.7, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert "too deeply" in sampling_refusal(chat, deep, REASON)
    message = sampling_refusal(chat, b'{"temperature": 0.7}', REASON)
    assert REASON in message and "without `temperature`" in message


BODIES = [
    {}, {"temperature": 0}, {"temperature": 0.7}, {"temperature": "0.7"}, {"temperature": " 1.5 "},
    {"temperature": True}, {"temperature": False}, {"temperature": None}, {"temperature": 1e-6},
    {"temperature": "1e-6"}, {"temperature": 2e-5}, {"temperature": "0"}, {"temperature": float("inf")},
    {"temperature": "warm"}, {"temperature": [0.7]}, {"temperature": -1}, {"top_k": 20}, {"top_p": 0.5, "seed": 3},
    {"temperature": 0, "top_k": 20, "min_p": 0.1}, {"temperature": 1, "n": 2}, {"temperature": "NaN"},
]


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_the_guard_refuses_exactly_what_vllms_own_request_models_would_sample(endpoint):
    """vLLM's request classes (the CPU build's, installed here) decide what samples: the guard must agree with them
    on every body they accept, with the engine's default temperature as the launch profile pins it."""
    if endpoint == "/v1/chat/completions":
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as Request
        base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    else:
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest as Request
        base = {"model": "m", "prompt": "hi"}
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingType

    checked = 0
    for extra in BODIES:
        body = json.dumps({**base, **extra}).encode()  # NaN and Infinity as Python's JSON writes them
        try:
            params = Request.model_validate(json.loads(body)).to_sampling_params(16, dict(GREEDY_DEFAULTS))
        except (ValueError, VLLMValidationError):  # vLLM answers a 400 itself (pydantic's error is a ValueError)
            continue
        samples = params.sampling_type is not SamplingType.GREEDY
        assert (sampling_refusal(endpoint, body, REASON) is not None) is samples, (extra, params.temperature)
        checked += 1
    assert checked >= 15, checked
