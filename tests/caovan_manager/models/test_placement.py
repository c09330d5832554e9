"""The placement owner's decisions, driven message by message with a recording fake of its effects."""

from __future__ import annotations

from typing import Any

import pytest

from caovan_manager.engine.launch import EngineTarget
from caovan_manager.models.catalog import Catalog, ModelEntry
from caovan_manager.models.placement import (
    Demand,
    FairnessElapsed,
    Load,
    Pending,
    Placement,
    PlacementMessage,
    Preload,
    Restart,
    TtlElapsed,
    Unload,
)
from caovan_manager.supervisor.messages import RestartCommand
from caovan_manager.supervisor.state import State, StateChanged

FAIRNESS_S = 30.0
IDLE_S = 5.0


class RecordingPlacementEffects:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.timers: dict[str, tuple[float, PlacementMessage]] = {}
        self.pending_counts: dict[str, int] = {}

    def start(self, model: str, reason: str) -> None: self.calls.append(("start", model))
    def stop(self, model: str, reason: str) -> None: self.calls.append(("stop", model, reason))
    def sleep(self, model: str, reason: str) -> None: self.calls.append(("sleep", model, reason))
    def pending(self, model: str) -> int: return self.pending_counts.get(model, 0)
    def set_timer(self, name: str, delay_s: float, message: PlacementMessage) -> None:
        self.timers[name] = (delay_s, message)
    def cancel_timer(self, name: str) -> None: self.timers.pop(name, None)
    def swapped_in(self, model: str, evicted: list[str], waited_s: float) -> None:
        self.calls.append(("swapped_in", model, tuple(evicted), waited_s))
    def used(self, model: str) -> None: pass

    def take(self) -> list[tuple[Any, ...]]:
        calls, self.calls = self.calls, []
        return [call[:2] if call[0] in ("stop", "sleep") else call for call in calls]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(name: str, gpus: set[int] | None, ttl_s: float = 0, preload: bool = False,
          sleep: bool = False) -> ModelEntry:
    return ModelEntry(name, EngineTarget(f"/models/{name}", []), None if gpus is None else frozenset(gpus),
                      ttl_s=ttl_s, preload=preload, sleep=sleep)


def machine(*entries: ModelEntry) -> tuple[Placement, RecordingPlacementEffects, Clock]:
    fx, clock = RecordingPlacementEffects(), Clock()
    return Placement(Catalog(entries, routed=True), fx, FAIRNESS_S, IDLE_S, clock), fx, clock


def run_up(p: Placement, model: str) -> None:
    for state in (State.STARTING, State.READY):
        p.handle(StateChanged(model, state))


def run_down(p: Placement, model: str) -> None:
    for state in (State.DRAINING, State.STOPPING, State.STOPPED):
        p.handle(StateChanged(model, state))


def test_a_request_for_a_stopped_model_starts_it_when_its_gpus_are_free():
    p, fx, _ = machine(entry("a", {0}), entry("b", {1}))
    p.handle(Demand("a"))
    assert fx.take() == [("start", "a")]
    p.handle(Demand("a"))  # more waiters while it loads: no second start
    p.handle(StateChanged("a", State.STARTING))
    assert fx.take() == []
    p.handle(StateChanged("a", State.READY))
    p.handle(Demand("b"))  # disjoint GPUs: side by side
    assert fx.take() == [("start", "b")]


def test_an_idle_model_on_the_same_gpu_is_swapped_out_and_the_swap_is_timed():
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    clock.now += 5
    p.handle(Demand("b"))
    assert fx.take() == [("stop", "a")]
    clock.now += 3
    p.handle(StateChanged("a", State.DRAINING))
    p.handle(StateChanged("a", State.STOPPING))
    assert fx.take() == []  # not before a's GPUs are free
    p.handle(StateChanged("a", State.STOPPED))
    assert fx.take() == [("start", "b")]
    clock.now += 10
    run_up(p, "b")
    assert fx.take() == [("swapped_in", "b", ("a",), 13.0)]
    assert p.slots["b"].swaps_in == 1


def put_to_sleep(p: Placement, model: str) -> None:
    for state in (State.DRAINING, State.FALLING_ASLEEP, State.ASLEEP):
        p.handle(StateChanged(model, state))


def test_a_model_with_sleep_is_swapped_out_by_sleep_mode_and_woken_for_its_next_request():
    p, fx, clock = machine(entry("a", {0}, sleep=True), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    p.handle(Demand("b"))
    assert fx.take() == [("sleep", "a")]
    p.handle(StateChanged("a", State.DRAINING))
    p.handle(StateChanged("a", State.FALLING_ASLEEP))
    assert fx.take() == []  # its GPU memory is released only once asleep
    p.handle(StateChanged("a", State.ASLEEP))
    assert fx.take() == [("start", "b")]
    run_up(p, "b")
    fx.take()
    clock.now += 10
    p.handle(Demand("a"))  # b has no sleep: stopped for a, which then wakes (its supervisor's start)
    assert fx.take() == [("stop", "b")]
    run_down(p, "b")
    assert fx.take() == [("start", "a")]
    p.handle(StateChanged("a", State.WAKING))
    clock.now += 2
    p.handle(StateChanged("a", State.READY))
    assert fx.take() == [("swapped_in", "a", ("b",), 2.0)]


def test_an_asleep_model_is_stopped_by_unload_and_by_its_ttl():
    p, fx, clock = machine(entry("a", {0}, sleep=True, ttl_s=60), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    p.handle(Demand("b"))
    put_to_sleep(p, "a")
    fx.take()
    assert fx.timers["ttl:a"][0] == 60  # asleep it still holds host memory and a process
    clock.now += 60
    p.handle(fx.timers["ttl:a"][1])
    assert fx.take() == [("stop", "a")]
    p.handle(StateChanged("a", State.STOPPING))
    p.handle(StateChanged("a", State.STOPPED))
    p.handle(Demand("a"))
    run_down(p, "b")  # b was stopped for a
    run_up(p, "a")
    p.handle(Demand("b"))
    put_to_sleep(p, "a")
    fx.take()
    outcome = p.handle(Unload("a"))
    assert fx.take() == [("stop", "a")] and "asleep" in outcome.message


def test_an_unload_while_it_drains_to_sleep_stops_it():
    p, fx, _ = machine(entry("a", {0}, sleep=True), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    p.handle(Demand("b"))
    p.handle(StateChanged("a", State.DRAINING))
    fx.take()
    p.handle(Unload("a"))
    assert fx.take() == [("stop", "a")]


def test_a_waking_model_keeps_its_gpus_until_it_reports():
    p, fx, clock = machine(entry("a", {0}, sleep=True), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    p.handle(Demand("b"))
    put_to_sleep(p, "a")
    run_up(p, "b")
    p.handle(Demand("a"))
    run_down(p, "b")
    p.handle(StateChanged("a", State.WAKING))
    fx.take()
    clock.now += FAIRNESS_S * 2
    p.handle(Demand("b"))
    assert fx.take() == []  # a is loading: protected whatever the time
    assert "fairness:b" not in fx.timers


def test_a_model_without_a_gpu_list_shares_every_gpu():
    p, fx, _ = machine(entry("a", {1}), entry("all", None))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    p.handle(Demand("all"))
    assert fx.take() == [("stop", "a")]


def test_a_busy_model_keeps_its_gpus_until_its_requests_end_and_idle_s_passes():
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    fx.pending_counts["a"] = 2
    p.handle(Pending("a", 2))
    p.handle(Demand("b"))
    assert fx.take() == []
    assert fx.timers["fairness:b"][0] == FAIRNESS_S
    clock.now += 4
    fx.pending_counts["a"] = 0
    p.handle(Pending("a", 0))
    assert fx.take() == []  # a client's next request usually follows at once: a counts as busy for idle_s
    assert fx.timers["fairness:b"][0] == IDLE_S
    clock.now += 2
    fx.pending_counts["a"] = 1
    p.handle(Pending("a", 1))  # it did
    fx.pending_counts["a"] = 0
    clock.now += 1
    p.handle(Pending("a", 0))
    assert fx.take() == []
    clock.now += IDLE_S
    p.handle(fx.timers["fairness:b"][1])
    assert fx.take() == [("stop", "a")]
    assert "fairness:b" not in fx.timers


def test_the_fairness_bound_drains_a_model_whose_requests_keep_coming():
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.pending_counts["a"] = 5
    fx.take()
    p.handle(Demand("b"))
    clock.now += FAIRNESS_S / 2
    p.handle(Pending("a", 5))  # still busy, bound not reached
    assert fx.take() == []
    assert fx.timers["fairness:b"][0] == pytest.approx(FAIRNESS_S / 2)
    clock.now += FAIRNESS_S / 2
    p.handle(fx.timers["fairness:b"][1])
    assert fx.take() == [("stop", "a")]  # its supervisor drains it (bounded) before stopping


def test_two_busy_models_take_turns_without_thrashing():
    """Both always have requests: each keeps the GPU for the fairness bound, then the other gets it, once."""
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.pending_counts.update(a=3, b=3)
    fx.take()
    turns = []
    holder, other = "a", "b"
    for _ in range(4):
        p.handle(Demand(other))
        for _ in range(5):  # requests keep coming and going before the bound
            clock.now += FAIRNESS_S / 10
            p.handle(Pending(holder, 3))
        assert fx.take() == [], "evicted before the fairness bound"
        clock.now += FAIRNESS_S
        p.handle(FairnessElapsed(other))
        assert fx.take() == [("stop", holder)]
        run_down(p, holder)
        assert fx.take() == [("start", other)]
        run_up(p, other)
        turns.append(other)
        assert [c[0] for c in fx.take()] == ["swapped_in"]
        holder, other = other, holder
    assert turns == ["b", "a", "b", "a"]


def test_the_oldest_waiter_goes_first_and_a_younger_one_does_not_take_its_gpus():
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}), entry("c", {0, 1}), entry("d", {1}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.pending_counts["a"] = 1
    fx.take()
    p.handle(Demand("c"))  # waits for a (busy)
    clock.now += 1
    p.handle(Demand("b"))  # younger, also on GPU 0
    clock.now += 1
    p.handle(Demand("d"))  # GPU 1 is free, but c (older) is waiting for it too
    assert fx.take() == []
    fx.pending_counts["a"] = 0
    p.handle(Pending("a", 0))
    clock.now += IDLE_S
    p.handle(fx.timers["fairness:c"][1])
    assert fx.take() == [("stop", "a")]
    run_down(p, "a")
    assert fx.take() == [("start", "c")]


def test_waiters_that_gave_up_start_nothing():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.pending_counts["a"] = 1
    p.handle(Demand("b"))
    p.handle(Pending("b", 0))  # b's request timed out in the queue
    fx.pending_counts["a"] = 0
    p.handle(Pending("a", 0))
    assert [c for c in fx.take() if c[0] != "start"] == []


def test_idle_ttl_unloads_and_a_request_rearms_it():
    p, fx, clock = machine(entry("a", {0}, ttl_s=60))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    assert fx.timers["ttl:a"][0] == 60
    fx.pending_counts["a"] = 1
    clock.now += 50
    p.handle(Pending("a", 1))
    clock.now += 5
    fx.pending_counts["a"] = 0
    p.handle(Pending("a", 0))
    assert fx.timers["ttl:a"][0] == 60
    clock.now += 10
    p.handle(TtlElapsed("a"))  # an older timer: 10 s idle only, re-armed for the rest
    assert fx.take() == [] and fx.timers["ttl:a"][0] == pytest.approx(50)
    clock.now += 50
    p.handle(TtlElapsed("a"))
    calls = fx.calls
    assert calls and calls[0][:2] == ("stop", "a") and "ttl_s = 60" in calls[0][2]


def test_a_failed_model_frees_its_gpus_for_the_next():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    p.handle(StateChanged("a", State.STARTING))
    fx.pending_counts["a"] = 1
    p.handle(Demand("b"))
    fx.take()
    p.handle(StateChanged("a", State.BACKOFF))
    p.handle(StateChanged("a", State.FAILED))
    assert fx.take() == [("start", "b")]
    assert p.slots["a"].waiting_since is None


def test_load_evicts_busy_models_at_once_and_unload_stops():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.pending_counts["a"] = 4
    fx.take()
    outcome = p.handle(Load("b"))
    assert outcome.accepted and "a" in outcome.message
    assert fx.take() == [("stop", "a")]
    run_down(p, "a")
    assert fx.take() == [("start", "b")]
    run_up(p, "b")
    fx.take()
    assert p.handle(Load("b")).message == "b is already loaded"
    assert p.handle(Unload("b")).accepted
    assert fx.take() == [("stop", "b")]
    run_down(p, "b")
    assert p.handle(Unload("b")).message == "b is not loaded"


def test_preload_starts_in_order_and_skips_a_model_sharing_gpus():
    p, fx, _ = machine(entry("a", {0}, preload=True), entry("b", {0}, preload=True), entry("c", {1}, preload=True),
                       entry("d", {1}))
    outcome = p.handle(Preload())
    assert fx.take() == [("start", "a"), ("start", "c")]
    assert not outcome.accepted and outcome.message.endswith("(their first request loads them): b")


def test_a_load_while_the_model_is_being_stopped_starts_it_once_stopped():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    p.handle(Demand("b"))
    fx.take()  # a is being swapped out for b
    outcome = p.handle(Load("a"))
    assert "loads again once stopped" in outcome.message and fx.take() == []
    run_down(p, "a")
    assert fx.take() == [("start", "a")]  # the admin's load goes before b's waiting requests
    assert p.handle(Unload("b")).message == "b is not loaded"
    assert p.slots["b"].waiting_since is None and not p.slots["b"].load_requested


def test_a_model_failed_with_processes_left_keeps_its_gpus():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    fx.take()
    p.handle(StateChanged("a", State.STOPPING))
    p.handle(StateChanged("a", State.FAILED, holds_gpus=True))  # survived SIGKILL: nothing may start beside it
    p.handle(Demand("b"))
    assert fx.take() == []
    p.handle(Load("a"))  # the admin ended them and loads it again
    assert fx.take() == [("start", "a")]


def test_a_crashed_model_restarting_keeps_its_gpus_while_it_loads():
    p, fx, clock = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    clock.now += FAIRNESS_S * 2  # its turn is long over
    fx.pending_counts["a"] = 1
    for state in (State.STOPPING, State.BACKOFF, State.STARTING):  # a crash, the supervisor restarting it
        p.handle(StateChanged("a", state))
    fx.take()
    p.handle(Demand("b"))
    assert fx.take() == []  # loading again: protected until it reports ready
    assert p.slots["a"].ready_since is None


def test_waiters_that_gave_up_leave_no_swap_to_count():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    p.handle(Demand("a"))
    run_up(p, "a")
    p.handle(Demand("b"))
    run_down(p, "a")  # swapped out for b ...
    assert fx.take()[-1] == ("start", "b")
    p.handle(StateChanged("b", State.STARTING))
    p.handle(StateChanged("b", State.FAILED))  # ... which failed; its waiters were refused
    p.handle(Pending("b", 0))
    p.handle(Load("b"))
    run_up(p, "b")
    assert [c for c in fx.take() if c[0] == "swapped_in"] == []  # a plain start, not a swap


def test_a_restart_is_decided_in_placements_loop_a_loaded_model_restarts_in_place_an_unloaded_one_loads():
    p, fx, _ = machine(entry("a", {0}), entry("b", {0}))
    outcome = p.handle(Restart("a", "admin"))  # not loaded: a load, which may need the shared GPU
    assert outcome.accepted and outcome.message == "loading a" and fx.take() == [("start", "a")]
    run_up(p, "a")
    outcome = p.handle(Restart("a", "admin"))  # loaded: its supervisor drains and restarts it on its GPU, and answers
    assert outcome.then == RestartCommand("admin") and fx.take() == []
    p.handle(StateChanged("a", State.FAILED, holds_gpus=True))  # left processes behind: not restarted in place
    assert p.handle(Restart("a", "admin")).message == "loading a" and fx.take() == [("start", "a")]
    run_up(p, "a")
    p.handle(Restart("b", "admin"))  # b shares a's GPU: a load of b, so a (idle) is stopped first
    assert fx.take() == [("stop", "a")]
