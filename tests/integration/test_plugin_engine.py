"""AcceptanceLock on the real CPU engine: GDNCore (caovan_mode=force, Triton interpreter) against the stock path.

The stock engine is the session's shared one (caovan_mode=auto on a CPU keeps vLLM's own kernels); the plugin
engine runs the same demo model and flags with our kernels. Same greedy tokens, same draft acceptance; and
OutputLock's canary never trips on either (tests/integration/daemon/test_canary.py has the build it catches)."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path

import httpx
import openai
import pytest

from caovan_kernels import contract
from caovan_kernels.contract import DISPATCH, REAL_PREFILL
from caovan_manager.canary.conversation import ask
from caovan_manager.canary.verdict import CanaryVerdict
from caovan_manager.config import CANARY_PROMPTS, CanarySettings
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


WORDS = "river stone night city music paper window garden winter coffee engine signal forest silver bridge".split()


def canary(engine: Engine, prompts: list[str], max_tokens: int) -> list[CanaryVerdict]:
    """The daemon's canary, one run per prompt (each verdict's margins kept), straight at the engine."""
    async def run() -> list[CanaryVerdict]:
        async with httpx.AsyncClient(base_url=engine.base_url) as client:
            return [await ask(client, contract.EMBEDDED_SERVED_MODEL_NAME,
                              CanarySettings(prompts=[prompt], max_tokens=max_tokens, timeout_s=600), "on_demand")
                    for prompt in prompts]
    return asyncio.run(run())


def test_the_canary_never_trips_on_correct_engines(engine, plugin_engine, random_seed):
    rng = random.Random(random_seed)
    drawn = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 30))) for _ in range(10)]
    # GDNCore runs in Triton's interpreter here (minutes per hundred tokens): the two prompts that expose a broken
    # GDN state on this model, and a drawn one.
    runs = {"stock": canary(engine, [*CANARY_PROMPTS, *EVAL_PROMPTS, *drawn], 24),
            "GDNCore": canary(plugin_engine, [*CANARY_PROMPTS[-2:], drawn[0]], 6)}
    for name, verdicts in runs.items():
        margins = sorted(m for v in verdicts for m in v.margins)
        print(f"\ncanary on {name}: {len(verdicts)} prompts, {sum(v.tokens for v in verdicts)} tokens, "
              f"{sum(v.exact for v in verdicts)} exact, {sum(v.ties for v in verdicts)} ties; non-zero margins "
              f"{margins[:10]}")
        assert [v.result for v in verdicts] == ["passed"] * len(verdicts), [v.detail for v in verdicts]
