"""The supervisor's sleep-mode transitions (a model swapped out by vLLM's sleep mode), against the recording fake."""

from __future__ import annotations

import pytest

from caovan_kernels.contract import SLEEP_MODE_FLAG
from caovan_manager.config import CanarySettings, PluginSettings, SupervisorSettings
from caovan_manager.logwatch.events import LaunchDecisions
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import (
    ActivateCommand,
    Drained,
    Exited,
    LogLine,
    ReadyProbe,
    RestartCommand,
    SleepCommand,
    Slept,
    StartCommand,
    StopCommand,
    StoppedGroup,
    Woke,
)
from caovan_manager.supervisor.state import State

from .fakes import RecordingEffects
from .test_machine import Clock, ready

# These tests are about the engine's life without OutputLock (test_machine_canary.py has it).
NO_CANARY = CanarySettings(enabled=False)


def make(fx: RecordingEffects) -> Machine:
    return Machine(fx, SupervisorSettings(), PluginSettings(), NO_CANARY, Clock(), bundled_version="0.1.0",
                   on_demand=True)


def launched(m: Machine, fx: RecordingEffects, sleep_mode: bool) -> int:
    """A ready engine whose decisions line shows its effective command (with or without sleep mode)."""
    m.handle(StartCommand())
    command = ("vllm", "serve", "/m", *((SLEEP_MODE_FLAG,) if sleep_mode else ()))
    m.handle(LogLine(m.run.run_id, LaunchDecisions(profile=True, decisions=(), command=command)))
    return ready(m, fx)


def asleep(m: Machine, fx: RecordingEffects) -> int:
    run_id = launched(m, fx, sleep_mode=True)
    m.handle(SleepCommand("swapped out for b"))
    m.handle(Drained(run_id, 0))
    m.handle(Slept(run_id, ok=True))
    assert m.state is State.ASLEEP
    fx.take()
    return run_id


@pytest.fixture
def fx() -> RecordingEffects:
    return RecordingEffects()


def test_sleep_drains_then_calls_sleep_then_holds_requests_for_a_wake(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=True)
    outcome = m.handle(SleepCommand("swapped out for b"))
    assert outcome.accepted and m.state is State.DRAINING
    assert fx.take() == [("gate_hold",), ("drain", run_id, 60.0)]
    m.handle(Drained(run_id, 0))
    assert m.state is State.FALLING_ASLEEP
    assert fx.take() == [("stop_watching",), ("sleep", run_id)]
    m.handle(Slept(run_id, ok=True))
    assert m.state is State.ASLEEP and m.run.run_id == run_id
    assert fx.take() == [("gate_idle",)]  # requests wait and ask placement to load it


def test_a_start_wakes_it_and_it_is_ready_once_a_completion_comes_back(fx):
    m = make(fx)
    run_id = asleep(m, fx)
    first_ready = m.run.ready_at
    m.handle(StartCommand("a request is waiting for it"))
    assert m.state is State.WAKING
    assert fx.names() == ["gate_hold", "wake", "set_timer"]
    fx.take()
    m.handle(Woke(run_id, ok=True))
    assert fx.take() == [("probe_ready", run_id)]
    m.clock.now += 5
    m.handle(ReadyProbe(run_id, ok=True))
    assert m.state is State.READY
    assert ("gate_open", run_id) in fx.calls and ("watch_progress", run_id) in fx.calls
    assert m.run.ready_at == first_ready  # start-up time stays the cold start's
    assert m.restarts == 0


def test_without_sleep_mode_in_its_launch_a_sleep_is_a_stop(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=False)
    m.handle(SleepCommand("swapped out for b"))
    assert "stopped instead of put to sleep" in m.reason and SLEEP_MODE_FLAG in m.reason
    m.handle(Drained(run_id, 0))
    assert m.state is State.STOPPING
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED


def test_a_failed_sleep_stops_the_engine_with_the_reason(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=True)
    m.handle(SleepCommand("swapped out for b"))
    m.handle(Drained(run_id, 0))
    m.handle(Slept(run_id, ok=False, detail="POST /sleep returned HTTP 404"))
    assert m.state is State.STOPPING and "HTTP 404" in m.last_error
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED


def test_a_failed_wake_restarts_the_engine_from_scratch(fx):
    m = make(fx)
    run_id = asleep(m, fx)
    m.handle(StartCommand())
    m.handle(Woke(run_id, ok=False, detail="CUDA out of memory"))
    assert m.state is State.STOPPING and "did not wake up" in m.last_error
    m.handle(StoppedGroup(run_id))
    assert m.state is State.BACKOFF
    assert ("record_restart", run_id, "wake_failed", m.last_error) in fx.calls
    m.handle(fx.fire("backoff"))
    assert m.state is State.STARTING and m.run.run_id != run_id


def test_an_engine_that_dies_asleep_is_cleaned_up_and_stays_stopped(fx):
    m = make(fx)
    run_id = asleep(m, fx)
    m.handle(Exited(run_id, -9))
    assert m.state is State.STOPPING and "SIGKILL" in m.last_error
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED  # nobody was waiting for it; the next request starts it afresh


@pytest.mark.parametrize("command,after", [(StopCommand("unloaded"), State.STOPPED),
                                           (RestartCommand(), State.STARTING)])
def test_stop_and_restart_of_an_asleep_engine_end_its_process(fx, command, after):
    m = make(fx)
    run_id = asleep(m, fx)
    m.handle(command)
    assert m.state is State.STOPPING and ("stop_group", run_id) in fx.calls
    m.handle(StoppedGroup(run_id))
    assert m.state is after


def test_a_start_during_the_drain_calls_the_sleep_off(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=True)
    m.handle(SleepCommand("swapped out for b"))
    m.handle(StartCommand())
    m.handle(Drained(run_id, 0))
    assert m.state is State.READY and ("gate_open", run_id) in fx.calls
    assert "sleep" not in fx.names()


def test_a_start_while_falling_asleep_wakes_it_once_asleep(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=True)
    m.handle(SleepCommand("swapped out for b"))
    m.handle(Drained(run_id, 0))
    m.handle(StartCommand())
    m.handle(Slept(run_id, ok=True))
    assert m.state is State.WAKING and ("wake", run_id) in fx.calls


def test_a_stop_while_falling_asleep_stops_it_once_asleep(fx):
    m = make(fx)
    run_id = launched(m, fx, sleep_mode=True)
    m.handle(SleepCommand("swapped out for b"))
    m.handle(Drained(run_id, 0))
    m.handle(StopCommand("daemon shutting down"))
    m.handle(Slept(run_id, ok=True))
    assert m.state is State.STOPPING
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED


def test_a_late_report_of_an_older_run_changes_nothing(fx):
    m = make(fx)
    run_id = asleep(m, fx)
    m.handle(Woke(run_id - 1, ok=False, detail="old"))
    m.handle(Slept(run_id, ok=False, detail="duplicate"))
    assert m.state is State.ASLEEP and not fx.calls


def test_a_sleep_during_a_plugin_activation_ends_it_as_a_stop_does(fx):
    m = make(fx)
    launched(m, fx, sleep_mode=True)
    m.handle(ActivateCommand("0.2.0"))
    m.handle(SleepCommand("swapped out for b"))
    assert m.activation is None and m.state is State.DRAINING and m.after_stop == "stop"
    assert any(call[0] == "record_activation" and call[3] == "aborted" for call in fx.calls)
