"""The periodic canary's manners: it sends a request only after no user request has been in flight for
canary.idle_s, and a run that never finds such a moment is `not_run` (never a pass), with no request sent."""

from __future__ import annotations

import asyncio

import httpx

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.canary.conversation import ask
from caovan_manager.config import CanarySettings, load_settings
from caovan_manager.engine.effects import EngineEffects
from caovan_manager.engine.launch import EngineTarget
from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker
from caovan_manager.metrics import DaemonMetrics
from caovan_manager.proxy.gate import Gate
from caovan_manager.store import Store


def effects_with_gate(tmp_path, gate: Gate) -> EngineEffects:
    settings = load_settings(state_dir=str(tmp_path), canary={"idle_s": 0.2, "busy_wait_s": 0.6})
    masker = Masker()
    return EngineEffects(settings, EngineTarget("/models/demo", []), [].append,
                         LogSink(tmp_path / "logs", 100_000, 1, 100, masker), gate, Store(tmp_path / "db.sqlite3"),
                         lambda version: None, DaemonMetrics().for_model("demo"), Broadcaster(), masker, tmp_path)


def test_a_quiet_moment_comes_only_once_no_user_request_is_in_flight(tmp_path):
    gate = Gate(4, 1, 1)
    effects = effects_with_gate(tmp_path, gate)

    async def scenario() -> list[bool]:
        gate.in_flight = 1  # a user's request in flight the whole time: no quiet moment within busy_wait_s
        busy = await effects._quiet_moment()
        gate.in_flight = 0
        quiet = await effects._quiet_moment()
        # A request that arrives and leaves while the canary waits: the moment counts from when it left.
        gate.in_flight = 1
        waiting = asyncio.ensure_future(effects._quiet_moment())
        await asyncio.sleep(0.3)
        early = waiting.done()
        gate.in_flight = 0
        return [busy, quiet, early, await waiting]

    assert asyncio.run(scenario()) == [False, True, False, True]


def test_a_canary_that_finds_no_quiet_moment_is_not_run_and_sends_nothing():
    sent = []

    def engine(request: httpx.Request) -> httpx.Response:  # records; the canary must not reach it
        sent.append(request)
        return httpx.Response(500)

    async def never() -> bool:
        return False

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine") as client:
            return await ask(client, "demo", CanarySettings(), "periodic", may_send=never, one_at_a_time=True)

    verdict = asyncio.run(scenario())
    assert verdict.result == "not_run" and "stayed busy" in verdict.detail and verdict.tokens == 0
    assert sent == []
