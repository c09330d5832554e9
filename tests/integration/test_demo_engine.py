"""The embedded default for real: vLLM's CPU engine serving the trained demo model with MTP=3."""

from __future__ import annotations

import re
import time

import openai
import pytest

from caovan_demo import corpus
from caovan_kernels import contract
from tests.support.engine import Engine
from tests.support.prompts import EVAL_PROMPTS

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def client(engine: Engine) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", timeout=120)


def _chat(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


def test_non_streaming_chat_answers_with_the_learned_text(client):
    reply = client.chat.completions.create(model=contract.EMBEDDED_SERVED_MODEL_NAME, messages=_chat("Hello!"),
                                           max_tokens=24, temperature=0)
    assert reply.usage.completion_tokens == 24
    assert corpus.ANSWER.startswith(reply.choices[0].message.content.strip())


def test_streaming_equals_non_streaming(client):
    kwargs = dict(model=contract.EMBEDDED_SERVED_MODEL_NAME, messages=_chat("Tell me about rivers"), max_tokens=40,
                  temperature=0)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs)
              if c.choices]
    # Not a count of pieces: vLLM merges the deltas a slow reader has not picked up, so on a loaded machine the whole
    # answer may come as one.
    assert "".join(pieces) == whole and whole


def test_mtp_acceptance_over_ten_prompts_from_engine_counters(client, engine):
    """Mean acceptance length = 1 + accepted / drafts over greedy 128-token chat completions (issue: >= 2.0)."""
    names = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total",
             "vllm:spec_decode_num_draft_tokens_total")
    before = [engine.metric_sum(n) for n in names]
    for prompt in EVAL_PROMPTS:
        reply = client.chat.completions.create(model=contract.EMBEDDED_SERVED_MODEL_NAME, messages=_chat(prompt),
                                               max_tokens=128, temperature=0)
        assert reply.usage.completion_tokens == 128
    drafts, accepted, drafted = (engine.metric_sum(n) - b for n, b in zip(names, before))
    mean_len = 1 + accepted / drafts
    rate = accepted / drafted
    print(f"\nMTP=3 over {len(EVAL_PROMPTS)} prompts: drafts={drafts:.0f} accepted={accepted:.0f} "
          f"drafted={drafted:.0f} mean acceptance length={mean_len:.2f} draft acceptance={rate:.1%}")
    assert drafts > 0
    assert mean_len >= 2.0
    assert rate >= 0.33


SPEC_LINE = re.compile(r"SpecDecoding metrics: .*Accepted: (\d+) tokens, Drafted: (\d+) tokens")
THROUGHPUT_LINE = re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s")


def test_log_has_spec_decoding_and_throughput_lines(client, engine):
    client.chat.completions.create(model=contract.EMBEDDED_SERVED_MODEL_NAME, messages=_chat("Good evening"),
                                   max_tokens=64, temperature=0)
    # vLLM logs its stats every 10 s while requests flow.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log = engine.log_text()
        spec = [m for m in SPEC_LINE.finditer(log) if int(m.group(1)) > 0 and int(m.group(2)) > 0]
        tput = [m for m in THROUGHPUT_LINE.finditer(log) if float(m.group(2)) > 0]
        if spec and tput:
            break
        time.sleep(1)
    assert spec, "no SpecDecoding line with non-zero accepted/drafted counts in the engine log"
    assert tput, "no throughput line with non-zero generation throughput in the engine log"
    assert "Caovan vLLM SM75 Turbo3 external plugin v" in log
    assert engine.metric_sum("vllm:generation_tokens_total") > 0
