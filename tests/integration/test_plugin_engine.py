"""AcceptanceLock on the real CPU engine: GDNCore (caovan_mode=force, Triton interpreter) against the stock path.

The stock engine is the session's shared one (caovan_mode=auto on a CPU keeps vLLM's own kernels); the plugin
engine runs the same demo model and flags with our kernels. Same greedy tokens, same draft acceptance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import openai
import pytest

from caovan_kernels.vllm.activity import DISPATCH, REAL_PREFILL
from caovan_manager import embedded
from tests.support.engine import Engine, start_engine, stop_engine
from tests.support.prompts import EVAL_PROMPTS

pytestmark = pytest.mark.engine

PROMPTS = EVAL_PROMPTS[:4]
MAX_TOKENS = 40
# Where greedy picks differ, the stock engine's top two candidates must be this close (nats) for the difference
# to count as rounding (bf16 activations, fp32 state in both paths); anything wider is a real divergence.
TIE_MARGIN = 0.05
SPEC_COUNTERS = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")


@pytest.fixture(scope="module")
def plugin_engine(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    args = embedded.engine_args() + ["--additional-config", json.dumps({"caovan": True, "caovan_mode": "force"})]
    log_path = tmp_path_factory.mktemp("plugin-engine") / "engine.log"
    running = start_engine(demo_model_dir, args, embedded.engine_env(), log_path)
    yield running
    stop_engine(running)


def _greedy_runs(engine: Engine) -> tuple[list[list[tuple[str, list]]], float]:
    """Per prompt, the greedy tokens with their top-2 alternatives; and the draft acceptance over these prompts."""
    client = openai.OpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", timeout=600)
    before = [engine.metric_sum(n) for n in SPEC_COUNTERS]
    runs = []
    for prompt in PROMPTS:
        reply = client.chat.completions.create(
            model=embedded.SERVED_MODEL_NAME, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
            temperature=0, logprobs=True, top_logprobs=2,
        )
        runs.append([(t.token, [(alt.token, alt.logprob) for alt in t.top_logprobs])
                     for t in reply.choices[0].logprobs.content])
    accepted, drafted = (engine.metric_sum(n) - b for n, b in zip(SPEC_COUNTERS, before))
    assert drafted > 0
    return runs, accepted / drafted


def test_gdncore_keeps_tokens_and_acceptance(engine, plugin_engine):
    stock, stock_rate = _greedy_runs(engine)
    ours, our_rate = _greedy_runs(plugin_engine)
    print(f"\nAcceptanceLock: stock draft acceptance {stock_rate:.1%}, GDNCore {our_rate:.1%} "
          f"over {len(PROMPTS)} prompts x {MAX_TOKENS} tokens")
    for prompt, theirs, mine in zip(PROMPTS, stock, ours):
        assert len(mine) == len(theirs) == MAX_TOKENS
        for pos, ((want, alts), (got, _)) in enumerate(zip(theirs, mine)):
            if want == got:
                continue
            margin = abs(alts[0][1] - alts[1][1]) if len(alts) > 1 else float("inf")
            assert margin < TIE_MARGIN, (
                f"prompt {prompt!r}: token {pos} differs ({want!r} stock, {got!r} GDNCore) with a stock logit "
                f"margin of {margin:.3f} nats, wider than rounding ({TIE_MARGIN})"
            )
            print(f"prompt {prompt!r}: tie at token {pos} (margin {margin:.4f}); rest not compared")
            break
    assert abs(our_rate - stock_rate) <= 0.02


def test_plugin_engine_proves_gdncore_ran(plugin_engine):
    client = openai.OpenAI(base_url=f"{plugin_engine.base_url}/v1", api_key="unused", timeout=600)
    client.chat.completions.create(model=embedded.SERVED_MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                   max_tokens=16, temperature=0)
    log = plugin_engine.log_text()
    for marker in (REAL_PREFILL, DISPATCH, "caovan_mode=force", "speculative_config=auto MTP=3"):
        assert marker in log
    # Each engine process prints a marker once, however many requests it serves.
    assert log.count(REAL_PREFILL) == 1 and log.count(DISPATCH) == 1
    calls = [int(n) for n in re.findall(r"\[Caovan GDNCore\] kernel calls: prefill=\d+ decode=(\d+)", log)]
    assert calls and max(calls) >= 10


def test_stock_engine_reports_without_taking_over(engine):
    log = engine.log_text()
    assert "caovan_mode=auto" in log
    assert "[Caovan GDNCore] kernels not used" in log
    assert REAL_PREFILL not in log and DISPATCH not in log


def test_required_turbo3_where_it_cannot_run_refuses_to_start(demo_model_dir, tmp_path):
    # On a CPU, caovan_mode=auto keeps the stock kernels: requiring Turbo3 there must stop the engine, loudly.
    config = {"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True}
    args = embedded.engine_args() + ["--additional-config", json.dumps(config)]
    with pytest.raises(RuntimeError, match="before ready"):
        start_engine(demo_model_dir, args, embedded.engine_env(), tmp_path / "engine.log")
    assert "caovan_require_turbo3 is set but GDNCore cannot run" in (tmp_path / "engine.log").read_text()
