"""AcceptanceLock on the real CPU engine: GDNCore (caovan_mode=force, Triton interpreter) against the stock path.

The stock engine is the session's shared one (caovan_mode=auto on a CPU keeps vLLM's own kernels); the plugin
engine runs the same demo model and flags with our kernels. Same greedy tokens, same draft acceptance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import openai
import pytest

from caovan_kernels import contract
from caovan_kernels.contract import DISPATCH, REAL_PREFILL
from tests.support.acceptance_lock import divergences, greedy_run
from tests.support.engine import Engine, start_engine, stop_engine
from tests.support.prompts import EVAL_PROMPTS

pytestmark = pytest.mark.engine

PROMPTS = EVAL_PROMPTS[:4]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def plugin_engine(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    args = contract.embedded_engine_args() + ["--additional-config", json.dumps({"caovan": True, "caovan_mode": "force"})]
    log_path = tmp_path_factory.mktemp("plugin-engine") / "engine.log"
    running = start_engine(demo_model_dir, args, contract.embedded_engine_env(), log_path)
    yield running
    stop_engine(running)


def test_gdncore_keeps_tokens_and_acceptance(engine, plugin_engine):
    stock = greedy_run(engine, contract.EMBEDDED_SERVED_MODEL_NAME, PROMPTS, MAX_TOKENS)
    ours = greedy_run(plugin_engine, contract.EMBEDDED_SERVED_MODEL_NAME, PROMPTS, MAX_TOKENS)
    print(f"\nAcceptanceLock: stock draft acceptance {stock.acceptance:.1%}, GDNCore {ours.acceptance:.1%} "
          f"over {len(PROMPTS)} prompts x {MAX_TOKENS} tokens")
    assert all(len(t) == MAX_TOKENS for t in stock.tokens)
    assert divergences(PROMPTS, stock, ours) == []


def test_plugin_engine_proves_gdncore_ran(plugin_engine):
    client = openai.OpenAI(base_url=f"{plugin_engine.base_url}/v1", api_key="unused", timeout=600)
    client.chat.completions.create(model=contract.EMBEDDED_SERVED_MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
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
    # TensorCore75 settles in every engine process and says why it stays off on a CPU
    assert "[Caovan TensorCore75] off triton=3.6.0 mode=auto: no sm_75 compile target: no NVIDIA GPU" in log


def test_required_turbo3_where_it_cannot_run_refuses_to_start(demo_model_dir, tmp_path):
    # On a CPU, caovan_mode=auto keeps the stock kernels: requiring Turbo3 there must stop the engine, loudly.
    config = {"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True}
    args = contract.embedded_engine_args() + ["--additional-config", json.dumps(config)]
    with pytest.raises(RuntimeError, match="before ready"):
        start_engine(demo_model_dir, args, contract.embedded_engine_env(), tmp_path / "engine.log")
    assert "caovan_require_turbo3 is set but GDNCore cannot run" in (tmp_path / "engine.log").read_text()
