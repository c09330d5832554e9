"""The supervisor's state machine, driven message by message against a recording fake of its effects."""

from __future__ import annotations

import pytest

from caovan_manager.config import CanarySettings, PluginSettings, SupervisorSettings
from caovan_manager.logwatch.events import Fatal, PluginBanner, Throughput
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import (
    ActivateCommand,
    Drained,
    Exited,
    LogLine,
    Measured,
    Measurement,
    Progress,
    ReadyProbe,
    RestartCommand,
    Spawned,
    SpawnFailed,
    StartCommand,
    StopCommand,
    StoppedGroup,
)
from caovan_manager.supervisor.state import State

from .fakes import RecordingEffects

# These tests are about the engine's life without OutputLock (test_machine_canary.py has it).
NO_CANARY = CanarySettings(enabled=False)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fx() -> RecordingEffects:
    return RecordingEffects()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(fx: RecordingEffects, clock: Clock, **overrides) -> Machine:
    values = dict(backoff_initial_s=2, backoff_max_s=10, max_restarts=3, hang_timeout_s=30, drain_timeout_s=20)
    settings = SupervisorSettings(**{**values, **overrides})
    return Machine(fx, settings, PluginSettings(), NO_CANARY, clock, bundled_version="0.1.0")


def ready(m: Machine, fx: RecordingEffects) -> int:
    """Start (or continue a start) until ready; returns the run id."""
    if m.state is not State.STARTING:
        m.handle(StartCommand())
    run_id = m.run.run_id
    m.handle(Spawned(run_id, 4242, ["python", "-m", "caovan_kernels.serve"]))
    m.handle(ReadyProbe(run_id, ok=True))
    assert m.state is State.READY
    fx.take()
    return run_id


def test_start_spawns_probes_and_arms_the_startup_timeout(fx, clock):
    m = make(fx, clock)
    outcome = m.handle(StartCommand())
    assert outcome.accepted and m.state is State.STARTING
    assert fx.names() == ["gate_hold", "record_run", "spawn", "probe_ready", "set_timer"]
    assert fx.calls[2] == ("spawn", 1, None)
    assert "startup" in fx.timers
    m.handle(ReadyProbe(1, ok=True))
    assert m.state is State.READY
    assert ("gate_open", 1) in fx.calls and ("watch_progress", 1) in fx.calls
    assert "startup" not in fx.timers


def test_crash_cleans_the_group_then_backs_off_exponentially_up_to_the_cap_then_fails(fx, clock):
    m = make(fx, clock)
    delays = []
    run_id = ready(m, fx)
    for attempt in range(4):
        m.handle(Exited(run_id, -9))
        assert m.state is State.STOPPING
        assert ("stop_group", run_id) in fx.calls and "gate_hold" in fx.names()
        m.handle(StoppedGroup(run_id))
        if attempt == 3:
            break
        assert m.state is State.BACKOFF
        delays.append(fx.timers["backoff"][0])
        m.handle(fx.fire("backoff"))
        assert m.state is State.STARTING
        run_id = m.run.run_id
        fx.take()
    assert delays == [2, 4, 8]
    assert m.state is State.FAILED
    assert "gave up after 4 consecutive failures" in m.reason and "killed by SIGKILL" in m.reason
    assert fx.calls[-1][0] == "gate_reject"
    assert m.restarts == 3


def test_backoff_delay_is_capped(fx, clock):
    m = make(fx, clock, max_restarts=10)
    delays = []
    for _ in range(5):
        m.handle(StartCommand()) if m.state is State.STOPPED else m.handle(fx.fire("backoff"))
        m.handle(SpawnFailed(m.run.run_id, "port 8001 in use"))
        m.handle(StoppedGroup(m.run.run_id))
        delays.append(fx.timers["backoff"][0])
    assert delays == [2, 4, 8, 10, 10]


def test_ready_resets_the_failure_count(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Exited(run_id, 1))
    m.handle(StoppedGroup(run_id))
    m.handle(fx.fire("backoff"))
    ready(m, fx)
    assert m.failures == 0


def test_exit_reason_names_the_last_fatal_log_line(fx, clock):
    m = make(fx, clock)
    m.handle(StartCommand())
    m.handle(LogLine(1, Fatal("oom", "CUDA out of memory. Tried to allocate 2.00 GiB")))
    m.handle(Exited(1, 1))
    assert m.reason == "the engine exited with code 1: oom: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_reports_of_an_old_run_are_ignored(fx, clock):
    m = make(fx, clock)
    old = ready(m, fx)
    m.handle(RestartCommand())
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = m.run.run_id
    assert new == old + 1 and m.state is State.STARTING
    m.handle(Exited(old, 0))
    m.handle(ReadyProbe(old, ok=False, detail="late"))
    assert m.state is State.STARTING


def test_a_late_drain_of_an_old_run_does_not_stop_the_new_one(fx, clock):
    m = make(fx, clock)
    old = ready(m, fx)
    m.handle(RestartCommand())
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = ready(m, fx)
    m.handle(RestartCommand())  # draining the new run
    m.handle(Drained(old, 3))  # the old run's drain reporting late
    assert m.state is State.DRAINING and m.run.run_id == new
    m.handle(Drained(new, 0))
    assert m.state is State.STOPPING


def test_graceful_restart_holds_requests_drains_stops_then_starts(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    assert m.handle(RestartCommand("config changed")).accepted
    assert m.state is State.DRAINING
    assert fx.take() == [("record_restart", run_id, "requested", "config changed"), ("gate_hold",), ("drain", run_id, 20)]
    m.handle(Drained(run_id, 0))
    assert m.state is State.STOPPING and ("stop_group", run_id) in fx.calls
    m.handle(Exited(run_id, 0))  # expected while stopping: not a crash
    assert m.state is State.STOPPING
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STARTING and m.failures == 0
    assert ("spawn", run_id + 1, None) in fx.calls


def test_startup_timeout_is_a_failure(fx, clock):
    m = make(fx, clock)
    m.handle(StartCommand())
    m.handle(fx.fire("startup"))
    assert m.state is State.STOPPING and "not ready within 600 s" in m.reason


def test_failed_readiness_probe_is_a_failure(fx, clock):
    m = make(fx, clock)
    m.handle(StartCommand())
    m.handle(ReadyProbe(1, ok=False, detail="smoke completion returned HTTP 500"))
    assert m.state is State.STOPPING and "HTTP 500" in m.reason


def test_hang_running_requests_without_new_tokens(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Progress(run_id, ok=True, running=2, generated_total=100))
    clock.now += 5
    m.handle(Progress(run_id, ok=True, running=2, generated_total=150))  # progress: fine
    for _ in range(5):
        clock.now += 5
        m.handle(Progress(run_id, ok=True, running=2, generated_total=150))
        assert m.state is State.READY
    clock.now += 5
    m.handle(Progress(run_id, ok=True, running=2, generated_total=150))
    assert m.state is State.STOPPING and "hung" in m.reason and "no token generated for 30 s" in m.reason


def test_idle_engine_is_not_hung(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    for _ in range(20):
        clock.now += 5
        m.handle(Progress(run_id, ok=True, running=0, generated_total=10))
    assert m.state is State.READY


def test_unanswered_metrics_for_the_hang_timeout_is_a_hang(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Progress(run_id, ok=False, detail="timed out"))
    clock.now += 20
    m.handle(Progress(run_id, ok=False, detail="timed out"))
    assert m.state is State.READY
    clock.now += 10
    m.handle(Progress(run_id, ok=False, detail="timed out"))
    assert m.state is State.STOPPING and "did not answer for 30 s" in m.reason
    m.handle(StoppedGroup(run_id))
    assert m.state is State.BACKOFF


def test_stop_when_ready_drains_then_stops_and_rejects_requests(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(StopCommand())
    assert m.state is State.DRAINING
    m.handle(Exited(run_id, 1))  # a crash during the drain of a stop stays a stop
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED
    assert fx.calls[-1][0] == "gate_reject"


def test_an_on_demand_engine_once_stopped_holds_requests_for_the_next_load(fx, clock):
    """With a models table a stopped engine's requests wait (and ask placement to load it) instead of a 503."""
    m = Machine(fx, SupervisorSettings(), PluginSettings(), NO_CANARY, clock, bundled_version="0.1.0", on_demand=True)
    run_id = ready(m, fx)
    m.handle(StopCommand("swapped out"))
    m.handle(Drained(run_id, 0))
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STOPPED and fx.calls[-1] == ("gate_idle",)
    assert "gate_reject" not in fx.names()
    m.handle(StopCommand())  # already stopped: still idle, not refusing
    assert fx.calls[-1] == ("gate_idle",)


def test_run_ids_come_from_the_shared_allocator(fx, clock):
    ids = iter([7, 11])
    m = Machine(fx, SupervisorSettings(), PluginSettings(), NO_CANARY, clock, bundled_version="0.1.0",
                run_ids=lambda: next(ids))
    assert ready(m, fx) == 7
    m.handle(RestartCommand())
    m.handle(Drained(7, 0))
    m.handle(StoppedGroup(7))
    assert m.run.run_id == 11


def test_stop_during_backoff_cancels_the_retry(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Exited(run_id, 1))
    m.handle(StoppedGroup(run_id))
    assert m.state is State.BACKOFF
    m.handle(StopCommand())
    assert m.state is State.STOPPED and "backoff" not in fx.timers


def test_start_while_stopping_starts_after_the_stop(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(StopCommand())
    m.handle(Drained(run_id, 0))
    m.handle(StartCommand())
    m.handle(StoppedGroup(run_id))
    assert m.state is State.STARTING


def test_surviving_processes_mean_failed_not_a_second_engine(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Exited(run_id, -9))
    m.handle(StoppedGroup(run_id, leftovers=["pid 77 VLLM::EngineCore (status disk-sleep)"]))
    assert m.state is State.FAILED and "VLLM::EngineCore" in m.reason and m.reason.endswith("then POST /start")
    assert m.leftovers  # placement keeps the model's GPUs taken
    assert "spawn" not in fx.names()


def test_a_models_table_entry_names_its_own_load_in_failure_messages(fx, clock):
    m = Machine(fx, SupervisorSettings(max_restarts=0), PluginSettings(), NO_CANARY, clock, bundled_version="0.1.0",
                on_demand=True, start_hint="POST /models/coder/load")
    run_id = ready(m, fx)
    m.handle(Exited(run_id, 1))
    m.handle(StoppedGroup(run_id))
    assert m.state is State.FAILED and m.reason.endswith("then POST /models/coder/load") and not m.leftovers


def test_log_samples_are_kept_for_status(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    sample = Throughput(prompt_tps=1.0, generation_tps=20.0, running=1, waiting=0, kv_cache_usage_pct=3.0)
    m.handle(LogLine(run_id, sample))
    m.handle(LogLine(run_id, PluginBanner("0.1.0")))
    assert m.latest["throughput"] is sample and m.run.marker_values() == {"plugin_banner": "0.1.0"}


# Plugin activation --------------------------------------------------------------------------------------------------

BASE = Measurement(tokens_per_s=50.0, acceptance_rate=0.6, tokens=200)


def activate_until_new_engine_started(m: Machine, fx: RecordingEffects, version: str) -> int:
    """Activation through baseline, drain and stop, up to the new version's engine starting; its run id."""
    old = m.run.run_id
    assert m.handle(ActivateCommand(version)).accepted
    assert fx.take() == [("measure", old)]
    m.handle(Measured(old, BASE))
    assert m.state is State.DRAINING
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    assert m.state is State.STARTING and ("spawn", old + 1, version) in fx.calls
    return m.run.run_id


def activate_until_new_engine_ready(m: Machine, fx: RecordingEffects, version: str) -> int:
    new = activate_until_new_engine_started(m, fx, version)
    m.handle(LogLine(new, PluginBanner(version)))
    m.handle(ReadyProbe(new, ok=True))
    return new


def test_activation_verified_keeps_the_new_version(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    new = activate_until_new_engine_ready(m, fx, "0.2.0")
    assert ("measure", new) in fx.calls
    m.handle(Measured(new, Measurement(tokens_per_s=48.0, acceptance_rate=0.58, tokens=200)))
    assert m.active_version == "0.2.0" and m.activation is None and m.state is State.READY
    assert ("save_active_version", "0.2.0") in fx.calls
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    assert record[1:4] == (None, "0.2.0", "activated")


def test_activation_with_slower_new_version_rolls_back_and_records_why(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    new = activate_until_new_engine_ready(m, fx, "0.2.0")
    fx.take()
    m.handle(Measured(new, Measurement(tokens_per_s=20.0, acceptance_rate=0.6, tokens=200)))
    assert m.state is State.DRAINING and "throughput fell to 20.0 tokens/s from 50.0" in m.reason
    m.handle(Drained(new, 0))
    m.handle(StoppedGroup(new))
    assert ("spawn", new + 1, None) in fx.calls  # back on the previous (bundled) version
    m.handle(ReadyProbe(new + 1, ok=True))
    assert m.active_version is None and m.activation is None
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    assert record[3] == "rolled_back" and "throughput fell" in record[4]
    assert record[5]["candidate"]["tokens_per_s"] == 20.0


def test_activation_with_lower_acceptance_rolls_back(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    new = activate_until_new_engine_ready(m, fx, "0.2.0")
    m.handle(Measured(new, Measurement(tokens_per_s=50.0, acceptance_rate=0.3, tokens=200)))
    assert m.activation.phase == "rollback" and "acceptance fell to 0.300" in m.reason


def test_activation_whose_banner_shows_another_version_rolls_back(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    new = activate_until_new_engine_started(m, fx, "0.2.0")
    m.handle(LogLine(new, PluginBanner("0.1.0")))
    m.handle(ReadyProbe(new, ok=True))
    assert m.activation.phase == "rollback" and "banner shows version 0.1.0, expected 0.2.0" in m.reason


def test_activation_without_banner_times_out_and_rolls_back(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    m.handle(ReadyProbe(activate_until_new_engine_started(m, fx, "0.2.0"), ok=True))
    assert m.state is State.READY and "banner" in fx.timers
    m.handle(fx.fire("banner"))
    assert m.activation.phase == "rollback" and "plugin was not loaded" in m.reason


def test_activation_whose_engine_crashes_at_start_rolls_back_without_backoff(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    new = activate_until_new_engine_started(m, fx, "0.2.0")
    m.handle(LogLine(new, Fatal("engine_start_failed", "ImportError: bad plugin")))
    m.handle(Exited(new, 1))
    m.handle(StoppedGroup(new))
    assert m.state is State.STARTING and m.run.version is None and "backoff" not in fx.timers
    m.handle(ReadyProbe(m.run.run_id, ok=True))
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    assert record[3] == "rolled_back" and "ImportError: bad plugin" in record[4]


def test_activation_conflicts(fx, clock):
    m = make(fx, clock)
    out = m.handle(ActivateCommand("0.2.0"))
    assert not out.accepted and out.conflict and "stopped" in out.message
    ready(m, fx)
    assert m.handle(ActivateCommand(None)).conflict  # bundled is already active
    assert m.handle(ActivateCommand("0.2.0")).accepted
    assert m.handle(RestartCommand()).conflict
    assert m.handle(ActivateCommand("0.3.0")).conflict


def test_failed_baseline_measurement_changes_nothing(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(ActivateCommand("0.2.0"))
    m.handle(Measured(run_id, None, error="HTTP 500"))
    assert m.state is State.READY and m.activation is None
    assert [c for c in fx.calls if c[0] == "record_activation"][-1][3] == "failed"


def test_stop_aborts_an_activation(fx, clock):
    m = make(fx, clock)
    ready(m, fx)
    m.handle(ActivateCommand("0.2.0"))
    m.handle(StopCommand())
    assert m.activation is None and m.state is State.DRAINING
    assert [c for c in fx.calls if c[0] == "record_activation"][-1][3] == "aborted"


def test_exit_without_a_recognised_fatal_line_names_the_last_output_line(fx, clock):
    m = make(fx, clock)
    m.handle(StartCommand())
    m.handle(Exited(1, 2, "api_server.py: error: unrecognized arguments: --no-such-flag"))
    assert m.reason == "the engine exited with code 2: api_server.py: error: unrecognized arguments: --no-such-flag"
    assert [c for c in fx.calls if c[0] == "stop_group"]


def test_restart_causes_are_recorded(fx, clock):
    m = make(fx, clock)
    run_id = ready(m, fx)
    m.handle(Exited(run_id, -9))
    m.handle(StoppedGroup(run_id))
    assert [c[2] for c in fx.calls if c[0] == "record_restart"] == ["crash"]
