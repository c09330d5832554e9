"""Which requests an engine that decodes greedily only refuses (the relay's side of the `sampling` decision)."""

from __future__ import annotations

import json

from caovan_kernels.contract import GREEDY_ONLY, SAMPLING_DECISION
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
                     {"temperature": " 1.5 "}, {"temperature": float("inf")}):
        assert refused(chat, {"model": "m", **sampling}), sampling
        assert refused("/v1/completions", {"prompt": "x", **sampling}), sampling
    for greedy in ({}, {"temperature": 0}, {"temperature": 0.0, "top_k": 20}, {"temperature": None},
                   {"temperature": 1e-6}, {"temperature": False}, {"temperature": "0"}, {"top_p": 0.5}):
        assert not refused(chat, {"model": "m", **greedy}), greedy
    # NaN is not below the greedy threshold, so vLLM samples with it; Python's JSON reader (the engine's) accepts it.
    assert sampling_refusal(chat, b'{"temperature": NaN, "top_k": 5}', REASON) is not None
    # What vLLM cannot read as a number it refuses itself, with a 400 that names the field.
    for unreadable in ({"temperature": "warm"}, {"temperature": [0.7]}, {"temperature": {"value": 0.7}}):
        assert not refused(chat, {"model": "m", **unreadable}), unreadable
    assert not refused("/v1/embeddings", {"temperature": 0.7})  # nothing is sampled there
    assert sampling_refusal(chat, b"not json", REASON) is None  # the engine answers that itself
    message = sampling_refusal(chat, b'{"temperature": 0.7}', REASON)
    assert REASON in message and "without `temperature`" in message
