"""The proxy gate: open, hold (bounded queue, bounded wait), reject; drains count admitted requests."""

from __future__ import annotations

import asyncio

import pytest

from caovan_manager.errors import Unavailable
from caovan_manager.proxy.gate import Gate


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_held_requests_are_released_when_the_gate_opens():
    async def scenario():
        gate = Gate(queue_size=4, queue_wait_s=5, retry_after_s=3)
        waiters = [asyncio.create_task(gate.enter(gate.deadline())) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert gate.waiting == 3 and not any(w.done() for w in waiters)
        gate.open("http://127.0.0.1:9")
        assert await asyncio.gather(*waiters) == ["http://127.0.0.1:9"] * 3
        assert gate.in_flight == 3 and gate.waiting == 0
    run(scenario())


def test_full_queue_and_long_wait_get_503_reasons():
    async def scenario():
        gate = Gate(queue_size=1, queue_wait_s=0.2, retry_after_s=7)
        first = asyncio.create_task(gate.enter(gate.deadline()))
        await asyncio.sleep(0.02)
        with pytest.raises(Unavailable, match="queue of waiting requests is full") as full:
            await gate.enter(gate.deadline())
        assert full.value.retry_after_s == 7
        with pytest.raises(Unavailable, match=r"waited 0.2 s \(proxy.queue_wait_s\)"):
            await first
        assert gate.waiting == 0
    run(scenario())


def test_reject_fails_waiters_and_newcomers_with_the_reason():
    async def scenario():
        gate = Gate(queue_size=4, queue_wait_s=5, retry_after_s=3)
        waiter = asyncio.create_task(gate.enter(gate.deadline()))
        await asyncio.sleep(0.02)
        gate.reject("the engine has failed: out of memory")
        with pytest.raises(Unavailable, match="out of memory"):
            await waiter
        with pytest.raises(Unavailable, match="out of memory"):
            await gate.enter(gate.deadline())
    run(scenario())


def test_drain_waits_for_admitted_requests_only_up_to_its_timeout():
    async def scenario():
        gate = Gate(queue_size=4, queue_wait_s=5, retry_after_s=3)
        gate.open("http://x")
        await gate.enter(gate.deadline())
        await gate.enter(gate.deadline())
        gate.hold()
        assert await gate.wait_idle(0.05) == 2
        asyncio.get_running_loop().call_later(0.05, gate.leave)
        asyncio.get_running_loop().call_later(0.1, gate.leave)
        assert await gate.wait_idle(2) == 0
    run(scenario())


def test_hold_stops_new_admissions_at_once():
    async def scenario():
        gate = Gate(queue_size=4, queue_wait_s=0.1, retry_after_s=3)
        gate.open("http://x")
        gate.hold("draining")
        with pytest.raises(Unavailable, match="draining"):
            await gate.enter(gate.deadline())
        assert gate.in_flight == 0
    run(scenario())


def test_one_deadline_bounds_every_try_of_a_request():
    async def scenario():
        loop = asyncio.get_running_loop()
        gate = Gate(queue_size=4, queue_wait_s=0.3, retry_after_s=3)
        deadline = gate.deadline()
        await asyncio.sleep(0.2)  # a first try that took most of the wait (a connection refused by a dead engine)
        started = loop.time()
        with pytest.raises(Unavailable, match=r"waited 0.3 s"):
            await gate.enter(deadline)
        assert loop.time() - started < 0.2, "the second try waited a full queue_wait_s again"
    run(scenario())


def test_an_idle_gate_asks_for_its_engine_and_reports_its_pending_requests():
    async def scenario():
        demands, pending = [], []
        gate = Gate(queue_size=4, queue_wait_s=5, retry_after_s=3, on_demand=lambda: demands.append(1),
                    on_pending=pending.append)
        gate.idle()
        assert demands == []  # nobody waits yet
        waiters = [asyncio.create_task(gate.enter(gate.deadline())) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert len(demands) == 2 and pending == [1] and gate.waiting == 2
        gate.hold("draining")  # a swap begins: they keep waiting
        gate.idle()  # stopped again with requests queued: it asks for the engine once more
        assert len(demands) == 3
        gate.open("http://127.0.0.1:9")
        await asyncio.gather(*waiters)
        assert pending == [1]  # waiting became in flight: still busy
        gate.leave()
        gate.leave()
        assert pending == [1, 0]
    run(scenario())


def test_an_idle_gate_without_queue_room_refuses_but_still_asks_for_its_engine():
    async def scenario():
        demands = []
        gate = Gate(queue_size=0, queue_wait_s=5, retry_after_s=3, on_demand=lambda: demands.append(1))
        gate.idle()
        with pytest.raises(Unavailable, match="queue of waiting requests is full"):
            await gate.enter(gate.deadline())
        assert demands == [1]  # the next request finds it loading, or loaded
    run(scenario())
