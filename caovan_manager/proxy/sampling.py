"""Requests an engine would answer wrongly: the launch profile says when an engine decodes greedily only.

vLLM's CPU build runs speculative decoding's sampler (Triton code) only with a Triton CPU backend, which PyPI does not
have; there, a request that samples gets wrong tokens, and one with top_k stops the engine for everyone. The profile
of `caovan-vllm-serve` records that as the decision `sampling = greedy only` with its reason
(caovan_kernels.contract), and the relay refuses such requests with that reason instead of relaying them. Requests
that leave `temperature` unset take the engine's default, which the same profile pins to greedy
(`--override-generation-config`, contract.GREEDY_DEFAULTS).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import pydantic

from caovan_kernels.contract import GREEDY_ONLY, SAMPLING_DECISION

# How vLLM's request models read `temperature`: pydantic in lax mode, so "0.7" and true are numbers too, and NaN
# (which Python's JSON reader accepts) passes their checks and samples.
_TEMPERATURE = pydantic.TypeAdapter(float | None)
# Where a body's `temperature` asks for sampling.
SAMPLING_LABELS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"})


def greedy_only_reason(decisions: Iterable[Mapping[str, str]]) -> str | None:
    """The reason an engine decodes greedily only, from its launch decisions; None when it samples."""
    for decision in decisions:
        if decision.get("name") == SAMPLING_DECISION and decision.get("value") == GREEDY_ONLY:
            return decision.get("reason") or "the launch profile says so"
    return None


def sampling_refusal(label: str, body: bytes, greedy_only: str) -> str | None:
    """Why a request must be refused by an engine that decodes greedily only, or None if it may go on (it asks for
    no sampling, or its body is not JSON the engine would read: the engine answers that itself)."""
    if label not in SAMPLING_LABELS:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    except RecursionError:  # how deep JSON can nest depends on the reader's stack: the engine's may read it
        return (f"this engine decodes greedily only ({greedy_only}), and the request body nests JSON too deeply for "
                f"the daemon to check that it does not sample; send a flatter document")
    if not isinstance(document, dict):
        return None
    try:
        temperature = _TEMPERATURE.validate_python(document.get("temperature"))
    except pydantic.ValidationError:
        return None  # the engine refuses a temperature it cannot read
    # Any temperature above 0 samples: vLLM raises those below 0.01 to 0.01. (NaN is not <= 0 either.)
    if temperature is not None and not temperature <= 0:
        return (f"this engine decodes greedily only ({greedy_only}); send the request without `temperature` "
                f"or with `temperature: 0`")
    return None
