"""DraftVocab's verified switch in the state machine: measure, restart with the setting, check the engine's line,
measure again; kept only if tokens/s rose and acceptance held, rolled back otherwise; off without proof."""

from __future__ import annotations

import pytest

from caovan_manager.config import CanarySettings, PluginSettings, SupervisorSettings
from caovan_manager.logwatch.events import PluginDraftVocab
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import (
    ActivateCommand,
    BackoffElapsed,
    CanaryChecked,
    CanaryCommand,
    DraftVocabCommand,
    Drained,
    Exited,
    LogLine,
    Measured,
    Measurement,
    ReadyProbe,
    StoppedGroup,
)
from caovan_manager.supervisor.state import State

from . import test_machine_canary
from .fakes import RecordingEffects
from .test_machine import Clock, ready

BASE = Measurement(tokens_per_s=50.0, acceptance_rate=0.6, tokens=200)
ACTIVE = PluginDraftVocab(True, 1000, 248320, "1000 ids by tokenizer order")


@pytest.fixture
def fx() -> RecordingEffects:
    return RecordingEffects()


def make(fx: RecordingEffects, **plugin: float) -> Machine:
    settings = SupervisorSettings(backoff_initial_s=2, backoff_max_s=10, max_restarts=3, hang_timeout_s=30,
                                  drain_timeout_s=20)
    return Machine(fx, settings, PluginSettings(**plugin), CanarySettings(enabled=False), Clock(),
                   bundled_version="0.1.0")


def switch_until_ready(m: Machine, fx: RecordingEffects, setting: object, line: PluginDraftVocab | None) -> int:
    old = m.run.run_id
    assert m.handle(DraftVocabCommand(setting)).accepted
    assert fx.take() == [("measure", old)]
    m.handle(Measured(old, BASE))
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = m.run.run_id
    assert m.state is State.STARTING and ("spawn", new, None, ("draft_vocab", setting)) in fx.calls
    if line is not None:
        m.handle(LogLine(new, line))
    m.handle(ReadyProbe(new, ok=True))
    return new


def outcome(fx: RecordingEffects) -> tuple[str, str, dict]:
    record = [c for c in fx.calls if c[0] == "record_activation"][-1]
    return record[3], record[4], record[5]


def test_a_faster_engine_with_acceptance_held_keeps_the_setting(fx):
    m = make(fx)
    ready(m, fx)
    new = switch_until_ready(m, fx, 32768, ACTIVE)
    assert ("measure", new) in fx.calls
    m.handle(Measured(new, Measurement(tokens_per_s=61.0, acceptance_rate=0.57, tokens=200)))
    assert m.draft_vocab == 32768 and m.activation is None and m.state is State.READY
    assert ("save_draft_vocab", 32768) in fx.calls
    result, reason, details = outcome(fx)
    assert result == "activated" and "50.0 -> 61.0 tokens/s" in reason
    assert details["kind"] == "draft_vocab" and details["to_draft_vocab"] == 32768
    # later starts keep it
    m.handle(ActivateCommand("0.2.0"))
    m.handle(Measured(new, BASE))
    m.handle(Drained(new, 0))
    m.handle(StoppedGroup(new))
    assert fx.calls[-3][0] == "spawn" and fx.calls[-3][2:] == ("0.2.0", ("draft_vocab", 32768))


@pytest.mark.parametrize(("after", "says"), [
    (Measurement(tokens_per_s=50.0, acceptance_rate=0.6, tokens=200), "did not rise above 50.0"),
    (Measurement(tokens_per_s=70.0, acceptance_rate=0.4, tokens=200), "acceptance fell to 0.400 from 0.600"),
    (Measurement(tokens_per_s=70.0, acceptance_rate=None, tokens=200), "reports no speculative-decoding"),
], ids=["not faster", "acceptance fell", "no acceptance"])
def test_a_switch_that_does_not_pay_rolls_back_to_what_ran_before(fx, after, says):
    m = make(fx)
    ready(m, fx)
    new = switch_until_ready(m, fx, {"size": 4096}, ACTIVE)
    m.handle(Measured(new, after))
    assert m.activation.phase == "rollback" and says in m.reason and "rolling back to DraftVocab off" in m.reason
    m.handle(Drained(new, 0))
    m.handle(StoppedGroup(new))
    assert fx.calls[-3] == ("spawn", new + 1, None)  # without the setting
    m.handle(ReadyProbe(new + 1, ok=True))
    result, reason, _ = outcome(fx)
    assert result == "rolled_back" and says in reason and m.draft_vocab is None
    assert not [c for c in fx.calls if c[0] == "save_draft_vocab"]


def test_the_speedup_asked_for_is_a_setting(fx):
    m = make(fx, draft_vocab_min_speedup=0.5)
    ready(m, fx)
    new = switch_until_ready(m, fx, 256, ACTIVE)
    m.handle(Measured(new, Measurement(tokens_per_s=30.0, acceptance_rate=0.6, tokens=200)))
    assert m.draft_vocab == 256 and outcome(fx)[0] == "activated"


@pytest.mark.parametrize(("line", "says"), [
    (None, "no DraftVocab line"),
    (PluginDraftVocab(False, 0, 1024, "the lm_head is quantized"),
     "it says: the lm_head is quantized"),
])
def test_an_engine_that_did_not_turn_it_on_rolls_back_unmeasured(fx, line, says):
    m = make(fx)
    ready(m, fx)
    new = switch_until_ready(m, fx, 256, line)
    assert ("measure", new) not in fx.calls
    assert m.activation.phase == "rollback" and says in m.reason


def test_off_needs_no_proof_and_a_busy_or_idle_engine_is_answered(fx):
    m = make(fx)
    assert m.handle(DraftVocabCommand(256)).conflict  # not ready: nothing to compare against
    ready(m, fx)
    assert m.handle(DraftVocabCommand(None)).conflict  # already off
    assert m.handle(DraftVocabCommand(256)).accepted
    busy = m.handle(DraftVocabCommand(512))
    assert busy.conflict and "DraftVocab switch off -> 256" in busy.message
    assert m.handle(ActivateCommand("0.2.0")).conflict
    m2 = Machine(RecordingEffects(), m.settings, PluginSettings(), CanarySettings(enabled=False), Clock(),
                 bundled_version="0.1.0", draft_vocab=256)
    run = ready(m2, m2.fx)
    off = m2.handle(DraftVocabCommand(None))
    assert off.accepted and m2.draft_vocab is None and m2.state is State.DRAINING
    assert ("save_draft_vocab", None) in m2.fx.calls
    m2.handle(Drained(run, 0))
    m2.handle(StoppedGroup(run))
    assert m2.fx.calls[-3] == ("spawn", run + 1, None)


def test_an_engine_that_dies_while_measured_ends_the_switch_unchanged(fx):
    m = make(fx)
    old = ready(m, fx)
    assert m.handle(DraftVocabCommand(256)).accepted
    m.handle(Exited(old, -9, "killed"))
    result, reason, _ = outcome(fx)
    assert result == "failed" and "nothing was changed" in reason and m.activation is None
    m.handle(StoppedGroup(old))
    m.handle(BackoffElapsed(old))
    assert fx.calls[-3] == ("spawn", old + 1, None)  # restarted as it was


def test_a_crash_of_the_new_engine_rolls_back_to_the_setting_before(fx):
    m = Machine(RecordingEffects(), make(fx).settings, PluginSettings(), CanarySettings(enabled=False), Clock(),
                bundled_version="0.1.0", draft_vocab=512)
    fx = m.fx
    old = ready(m, fx)
    m.handle(DraftVocabCommand(256))
    m.handle(Measured(old, BASE))
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = m.run.run_id
    m.handle(Exited(new, 1, "boom"))
    assert m.activation.phase == "rollback"
    m.handle(StoppedGroup(new))
    assert fx.calls[-3] == ("spawn", new + 1, None, ("draft_vocab", 512))


def test_a_plugin_activation_rolled_back_keeps_the_draft_vocab_setting(fx):
    m = Machine(fx, make(fx).settings, PluginSettings(), CanarySettings(enabled=False), Clock(),
                bundled_version="0.1.0", draft_vocab=512)
    old = ready(m, fx)
    m.handle(ActivateCommand("0.2.0"))
    m.handle(Measured(old, BASE))
    m.handle(Drained(old, 0))
    m.handle(StoppedGroup(old))
    new = m.run.run_id
    assert fx.calls[-3] == ("spawn", new, "0.2.0", ("draft_vocab", 512))
    m.handle(Exited(new, 1, "boom"))
    m.handle(StoppedGroup(new))
    assert fx.calls[-3] == ("spawn", new + 1, None, ("draft_vocab", 512)) and m.draft_vocab == 512


def test_no_switch_starts_while_a_canary_checks_the_engine(fx):
    m = test_machine_canary.make(fx)
    run_id = test_machine_canary.ready(m, fx)
    assert m.handle(CanaryCommand()).accepted and m.canary_running == "on_demand"
    for command in (DraftVocabCommand(256), ActivateCommand("0.2.0")):
        refused = m.handle(command)
        assert refused.conflict and "canary run (on_demand)" in refused.message
    m.handle(CanaryChecked(run_id, test_machine_canary.passed("on_demand")))
    assert m.handle(DraftVocabCommand(256)).accepted
