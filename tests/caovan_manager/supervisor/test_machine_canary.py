"""OutputLock in the state machine: an engine is checked before it counts as ready, then periodically and on
request; a failed canary marks it degraded and canary.action decides what else happens."""

from __future__ import annotations

import pytest

from caovan_manager.canary.verdict import CanaryVerdict, Disagreement
from caovan_manager.config import CanarySettings, PluginSettings, SupervisorSettings
from caovan_manager.logwatch.events import PluginBanner
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import (
    ActivateCommand,
    CanaryChecked,
    CanaryCommand,
    Drained,
    Exited,
    LogLine,
    Measured,
    Measurement,
    ReadyProbe,
    RestartCommand,
    Spawned,
    StartCommand,
    StopCommand,
    StoppedGroup,
    Woke,
)
from caovan_manager.supervisor.state import State

from .fakes import RecordingEffects

BASE = Measurement(tokens_per_s=50.0, acceptance_rate=0.6, tokens=200)
EVIDENCE = Disagreement("The capital of France is", 3, 911, " Paris", 17, " the", 4.2, False, 0.25)


def passed(purpose="start") -> CanaryVerdict:
    return CanaryVerdict("passed", purpose, 0.25, tokens=24, exact=24)


def failed(purpose="start") -> CanaryVerdict:
    return CanaryVerdict("failed", purpose, 0.25, tokens=24, exact=20, disagreements=4, evidence=EVIDENCE)


def not_run(purpose="start") -> CanaryVerdict:
    return CanaryVerdict("not_run", purpose, 0.25, detail="HTTP 500")


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fx() -> RecordingEffects:
    return RecordingEffects()


def make(fx: RecordingEffects, action: str = "alert", interval_s: float = 600, **supervisor) -> Machine:
    return Machine(fx, SupervisorSettings(**{"max_restarts": 2, **supervisor}), PluginSettings(),
                   CanarySettings(action=action, interval_s=interval_s, fallback_args=["--enforce-eager"]), Clock(),
                   bundled_version="0.1.0")


def serving(m: Machine, fx: RecordingEffects) -> int:
    """Start (or continue a start) until the engine answers: the canary is asked; returns the run id."""
    if m.state is not State.STARTING:
        m.handle(StartCommand())
    run_id = m.run.run_id
    m.handle(Spawned(run_id, 4242, ["python"]))
    fx.take()
    m.handle(ReadyProbe(run_id, ok=True))
    assert m.state is State.CHECKING
    calls = fx.take()
    assert calls[0] == ("gate_hold",) and ("canary", run_id, m.canary_running) in calls
    return run_id


def ready(m: Machine, fx: RecordingEffects) -> int:
    run_id = serving(m, fx)
    m.handle(CanaryChecked(run_id, passed()))
    assert m.state is State.READY
    fx.take()
    return run_id


def test_an_engine_is_ready_only_after_its_canary_passed_and_requests_wait_meanwhile(fx):
    m = make(fx)
    run_id = serving(m, fx)
    assert m.canary_running == "start" and "gate_open" not in fx.names()
    m.handle(CanaryChecked(run_id, passed()))
    assert m.state is State.READY and m.reason == "serving" and m.degraded is None
    assert ("gate_open", run_id) in fx.calls and ("record_canary", "passed", False) in fx.calls
    assert fx.timers["canary"][0] == 600  # the periodic run is scheduled


def test_without_the_canary_an_engine_is_ready_at_once(fx):
    m = Machine(fx, SupervisorSettings(), PluginSettings(), CanarySettings(enabled=False), Clock(),
                bundled_version="0.1.0")
    m.handle(StartCommand())
    m.handle(ReadyProbe(m.run.run_id, ok=True))
    assert m.state is State.READY and "canary" not in fx.names() and "canary" not in fx.timers


def test_alert_serves_marked_degraded_until_a_canary_passes(fx):
    m = make(fx)
    run_id = serving(m, fx)
    m.handle(CanaryChecked(run_id, failed()))
    assert m.state is State.READY and "degraded" in m.reason and m.degraded.evidence == EVIDENCE
    assert ("record_canary", "failed", True) in fx.calls and ("gate_open", run_id) in fx.calls
    assert "4 of 24 generated tokens disagree" in m.last_error and "' Paris'" in m.last_error
    m.handle(fx.fire("canary"))
    assert m.canary_running == "periodic" and ("canary", run_id, "periodic") in fx.calls
    m.handle(CanaryChecked(run_id, not_run("periodic")))  # could not check: still degraded, never a pass
    assert m.degraded is not None and ("record_canary", "not_run", True) in fx.calls
    m.handle(fx.fire("canary"))
    m.handle(CanaryChecked(run_id, passed("periodic")))
    assert m.degraded is None and m.last_canary.result == "passed" and ("record_canary", "passed", False) in fx.calls


def test_a_canary_that_cannot_run_at_start_lets_the_engine_serve_unverified(fx):
    m = make(fx)
    run_id = serving(m, fx)
    m.handle(CanaryChecked(run_id, not_run()))
    assert m.state is State.READY and m.degraded is None and m.last_canary.result == "not_run"


def test_restart_action_fails_like_a_crashing_start_and_gives_up_after_max_restarts(fx):
    m = make(fx, action="restart")
    for attempt in range(3):
        run_id = serving(m, fx)
        m.handle(CanaryChecked(run_id, failed()))
        assert m.state is State.STOPPING and "the canary failed" in m.reason
        m.handle(StoppedGroup(run_id))
        if attempt < 2:
            assert m.state is State.BACKOFF
            assert [c for c in fx.calls if c[0] == "record_restart"][-1][2] == "canary"
            m.handle(fx.fire("backoff"))
    assert m.state is State.FAILED and "gave up after 3 consecutive failures" in m.reason


def test_restart_action_on_a_ready_engine_drains_first(fx):
    m = make(fx, action="restart")
    run_id = ready(m, fx)
    assert m.handle(CanaryCommand()).accepted
    m.handle(CanaryChecked(run_id, failed("on_demand")))
    assert m.state is State.DRAINING and ("drain", run_id, 60) in fx.calls
    m.handle(Drained(run_id, 0))
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STARTING and m.run.run_id == run_id + 1


def test_fallback_restarts_with_the_safer_arguments_once_then_alerts(fx):
    m = make(fx, action="fallback")
    run_id = serving(m, fx)
    m.handle(CanaryChecked(run_id, failed()))
    assert m.state is State.STOPPING and "--enforce-eager" in m.reason
    m.handle(StoppedGroup(run_id))
    assert ("spawn", run_id + 1, None, "fallback") in fx.calls and m.fallback
    second = serving(m, fx)
    m.handle(CanaryChecked(second, failed()))  # the safer arguments did not help: serve, degraded
    assert m.state is State.READY and m.degraded is not None
    m.handle(Exited(second, -9))  # a crash restart keeps the fallback arguments
    m.handle(StoppedGroup(second))
    m.handle(fx.fire("backoff"))
    assert last_spawn(fx) == ("spawn", second + 1, None, "fallback")
    third = serving(m, fx)
    m.handle(CanaryChecked(third, passed()))
    m.handle(RestartCommand())  # an admin's restart tries the configured arguments again
    m.handle(Drained(third, 0))
    m.handle(StoppedGroup(third))
    assert last_spawn(fx) == ("spawn", third + 1, None)


def last_spawn(fx: RecordingEffects) -> tuple:
    return [call for call in fx.calls if call[0] == "spawn"][-1]


def activate(m: Machine, fx: RecordingEffects, version: str) -> int:
    """From ready: baseline, drain, stop, start on `version` until it answers; the new run id."""
    old = m.run.run_id
    assert m.handle(ActivateCommand(version)).accepted
    m.handle(Measured(old, BASE))
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = m.run.run_id
    m.handle(LogLine(new, PluginBanner(version)))
    m.handle(ReadyProbe(new, ok=True))
    assert m.state is State.CHECKING and m.canary_running == "activation"
    return new


@pytest.mark.parametrize("verdict", [failed("activation"), not_run("activation")], ids=["failed", "not_run"])
def test_an_activation_whose_canary_does_not_pass_is_rolled_back_whatever_the_action(fx, verdict):
    m = make(fx, action="alert")
    ready(m, fx)
    new = activate(m, fx, "0.2.0")
    fx.take()
    m.handle(CanaryChecked(new, verdict))
    assert m.state is State.STOPPING and m.activation.phase == "rollback"
    assert "drain" not in fx.names()  # nobody was let in: nothing to drain
    m.handle(StoppedGroup(new))
    assert ("spawn", new + 1, None) in fx.calls
    back = serving(m, fx)
    m.handle(CanaryChecked(back, passed()))
    assert m.state is State.READY and m.activation is None and m.active_version is None
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    assert record[3] == "rolled_back" and "canary" in record[4]


def test_an_activation_whose_canary_passes_goes_on_to_its_measurements(fx):
    m = make(fx)
    ready(m, fx)
    new = activate(m, fx, "0.2.0")
    m.handle(CanaryChecked(new, passed("activation")))
    assert m.state is State.READY and ("measure", new) in fx.calls
    m.handle(Measured(new, BASE))
    assert m.active_version == "0.2.0" and m.activation is None


def test_rollback_action_goes_back_to_the_last_version_whose_canary_passed(fx):
    m = make(fx, action="rollback")
    ready(m, fx)  # the bundled version passes
    new = activate(m, fx, "0.2.0")
    m.handle(CanaryChecked(new, passed("activation")))
    m.handle(Measured(new, BASE))
    assert m.active_version == "0.2.0"
    m.handle(fx.fire("canary"))
    m.handle(CanaryChecked(new, failed("periodic")))
    assert m.state is State.DRAINING and m.active_version is None and ("save_active_version", None) in fx.calls
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    assert record[1:4] == ("0.2.0", None, "rolled_back") and "canary.action = rollback" in record[4]
    m.handle(Drained(new, 0))
    m.handle(StoppedGroup(new))
    assert ("spawn", new + 1, None) in fx.calls


def test_rollback_action_without_another_good_version_restarts(fx):
    m = make(fx, action="rollback")
    run_id = serving(m, fx)
    m.handle(CanaryChecked(run_id, failed()))
    assert m.state is State.STOPPING and "no other plugin version passed a canary here" in m.reason


def test_a_woken_engine_is_checked_before_it_serves(fx):
    m = make(fx)
    m.on_demand = True
    run_id = ready(m, fx)
    m.handle(StopCommand())  # no sleep mode here: a plain stop; the wake path is driven by hand below
    m.state = State.ASLEEP  # as after a sleep (test_machine_sleep.py drives the way there)
    m.handle(StartCommand())
    assert m.state is State.WAKING
    m.handle(Woke(run_id, ok=True))
    m.handle(ReadyProbe(run_id, ok=True))
    assert m.state is State.CHECKING and m.canary_running == "wake"


def test_on_demand_needs_a_ready_engine_and_shares_a_run_in_progress(fx):
    m = make(fx)
    refused = m.handle(CanaryCommand())
    assert not refused.accepted and refused.conflict and "stopped" in refused.message
    run_id = serving(m, fx)
    shared = m.handle(CanaryCommand())  # the start's canary is running: its verdict is the answer
    assert shared.accepted and "in progress" in shared.message and fx.names().count("canary") == 0
    m.handle(CanaryChecked(run_id, passed()))
    assert m.handle(CanaryCommand()).accepted and ("canary", run_id, "on_demand") in fx.calls


def test_the_periodic_run_waits_for_an_activation_and_reports_of_old_runs_are_dropped(fx):
    m = make(fx)
    run_id = ready(m, fx)
    due = fx.fire("canary")
    m.handle(ActivateCommand("0.2.0"))
    m.handle(due)
    assert m.canary_running is None and "canary" in fx.timers  # rescheduled, not run
    m.handle(Measured(run_id, BASE))
    m.handle(Drained(run_id, 0))
    m.handle(StoppedGroup(run_id))
    m.handle(CanaryChecked(run_id, failed("periodic")))  # a late report of the old run
    assert m.degraded is None and m.canaries == 1


def test_stop_and_crash_while_checking(fx):
    m = make(fx)
    run_id = serving(m, fx)
    m.handle(Exited(run_id, 1))
    assert m.state is State.STOPPING and "exited with code 1" in m.reason
    m.handle(StoppedGroup(run_id))
    m.handle(fx.fire("backoff"))
    second = serving(m, fx)
    m.handle(StopCommand())
    assert m.state is State.STOPPING
    m.handle(CanaryChecked(second, passed()))  # arrives while stopping: recorded, nothing moves
    assert m.state is State.STOPPING
