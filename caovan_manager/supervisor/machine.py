"""The supervisor's decisions: a plain state machine over the engine's life, one message at a time.

It owns the engine state and never acts itself: every action is a call on the effects layer, whose results come back
as messages. No clock reads except the injected `clock`, no I/O, no awaits, so unit tests drive it directly.

    stopped --start--> starting --ready--> checking --canary--> ready --restart/stop/activate--> draining --drained-->
    stopping
    stopping --group gone--> starting (restart) | stopped (stop) | backoff (failure) ; backoff --timer--> starting
    any failure beyond max_restarts consecutive --> failed (with the reason)

vLLM's sleep mode, for a model swapped out by placement (a stop where the engine's launch has no sleep mode):

    ready --sleep--> draining --drained--> falling_asleep --slept--> asleep --start--> waking --woke, ready--> ready
    asleep --stop/restart/exit--> stopping ; a failed sleep stops the engine, a failed wake restarts it

A verified switch rides on the same transitions: measure the engine, drain, restart it changed (a plugin version, or
DraftVocab's setting), check its answers (the canary), that the change is live (the plugin banner, the DraftVocab
line), measure again, keep it or roll back to what ran before.

OutputLock: an engine that serves is checked before it counts as ready (`checking`, requests held), then
periodically and on request while ready. A failed canary marks it degraded until one passes, and
canary.action says what else happens (alert, restart, rollback to the last version whose canary passed, or a restart
with canary.fallback_args).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Literal

from caovan_kernels import contract
from caovan_kernels.contract import SLEEP_MODE_FLAG
from caovan_manager.canary.verdict import CanaryVerdict, Purpose
from caovan_manager.config import CanarySettings, PluginSettings, SupervisorSettings
from caovan_manager.inbox import Outcome
from caovan_manager.logwatch import events

from .activation import Activation, PluginChoice, draft_label, draft_vocab_shortfall, regression
from .effects import Effects
from .hang import HangDetector
from .messages import (
    ActivateCommand,
    BackoffElapsed,
    BannerTimedOut,
    CanaryChecked,
    CanaryCommand,
    CanaryDue,
    DraftSetting,
    DraftVocabCommand,
    Drained,
    Exited,
    LogLine,
    Measured,
    Message,
    Progress,
    ReadyProbe,
    RestartCommand,
    SleepCommand,
    Slept,
    Spawned,
    SpawnFailed,
    StartCommand,
    StartupTimedOut,
    StopCommand,
    StoppedGroup,
    Woke,
)
from .run import Run
from .state import GATE_ON_ENTRY, State, check_transition

# What follows a drain: a stop (then stopped / started again / backoff), or sleep ("wake": a start came meanwhile).
AfterStop = Literal["stop", "start", "backoff", "sleep", "wake"]


class Machine:
    def __init__(
        self,
        effects: Effects,
        settings: SupervisorSettings,
        plugin_settings: PluginSettings,
        canary_settings: CanarySettings,
        clock: Callable[[], float],
        bundled_version: str,
        active_version: str | None = None,
        first_run_id: int = 1,
        plugin: PluginChoice | None = None,
        run_ids: Callable[[], int] | None = None,
        on_demand: bool = False,
        start_hint: str = "POST /start",
        draft_vocab: DraftSetting = None,
    ) -> None:
        self.fx = effects
        self.settings = settings
        self.plugin_settings = plugin_settings
        self.canary = canary_settings
        self.clock = clock
        self.bundled_version = bundled_version
        self.plugin = plugin or PluginChoice(active_version)
        self.draft_vocab = draft_vocab  # the caovan_draft_vocab setting engines start with (None: off)
        self.state = State.STOPPED
        self.reason = ""
        self.last_error = ""
        self.run: Run | None = None
        self.activation: Activation | None = None
        self.failures = 0
        self.restarts = 0
        self.after_stop: AfterStop = "stop"
        self.latest: dict[str, events.LogEvent] = {}
        self.state_since = clock()
        # Run ids are unique across the daemon's models (their log files and store rows share one space).
        counter = iter(range(first_run_id, 2**62))
        self._run_ids = run_ids or (lambda: next(counter))
        # On demand (a models table): a stopped engine's gate keeps requests waiting and asks for the model to be
        # loaded; otherwise it answers them with a 503 until POST /start.
        self.on_demand = on_demand
        self.start_hint = start_hint  # how an admin starts this engine again (named in failure messages)
        self.leftovers = False  # processes of the last run survived SIGKILL: its GPUs are not free
        self._failure_cause = "crash"
        self.hang = HangDetector(settings.hang_timeout_s)
        # OutputLock: the verdict of the canary now running (its purpose), the last one, the failed one the engine is
        # degraded by (until a canary passes), how many completed, the plugin version whose canary last passed (a
        # rollback's target; unknown until one passed), and whether later runs carry canary.fallback_args (until an
        # admin's restart).
        self.canary_running: Purpose | None = None
        self.last_canary: CanaryVerdict | None = None
        self.degraded: CanaryVerdict | None = None
        self.canaries = 0
        self.good_versions: list[str | None] = []  # oldest first, each once
        self.fallback = False

    @property
    def active_version(self) -> str | None:
        return self.plugin.version

    @active_version.setter
    def active_version(self, version: str | None) -> None:
        self.plugin.version = version

    # Entry point ------------------------------------------------------------------------------------------------------

    def handle(self, message: Message) -> Outcome | None:
        handler = getattr(self, "_on_" + type(message).__name__)
        return handler(message)

    # Commands ---------------------------------------------------------------------------------------------------------

    def _on_StartCommand(self, cmd: StartCommand) -> Outcome:
        if self.state in (State.STOPPED, State.FAILED):
            self.failures = 0
            self._spawn()
            return Outcome(True, "starting the engine")
        if self.state is State.BACKOFF:
            self.fx.cancel_timer("backoff")
            self._spawn()
            return Outcome(True, "starting the engine now instead of waiting for the backoff")
        if self.state is State.ASLEEP:
            self._wake()
            return Outcome(True, "waking the engine up")
        if self.after_stop == "sleep" and self.state in (State.DRAINING, State.FALLING_ASLEEP):
            self.after_stop = "wake"
            return Outcome(True, "the engine stays up (it was being put to sleep)")
        if self.state is State.STOPPING or (self.state is State.DRAINING and self.after_stop == "stop"):
            self.after_stop = "start"
            return Outcome(True, "the engine starts again once the current one has stopped")
        return Outcome(True, f"the engine is already {self.state.value}")

    def _on_StopCommand(self, cmd: StopCommand) -> Outcome:
        if self.activation is not None:
            self._finish_activation("aborted", cmd.reason)
        if self.state in (State.STOPPED, State.FAILED, State.BACKOFF):
            self.fx.cancel_timer("backoff")
            self._enter(State.STOPPED, cmd.reason)
            return Outcome(True, "the engine is stopped")
        if self.state is State.READY:
            self._drain_then("stop", cmd.reason)
            return Outcome(True, "draining in-flight requests, then stopping the engine")
        if self.state in (State.STARTING, State.CHECKING, State.WAKING, State.ASLEEP):
            self._stop_then("stop", cmd.reason)
        else:  # draining, falling asleep or stopping already: only the next step changes
            self.after_stop = "stop"
        return Outcome(True, "stopping the engine")

    def _on_SleepCommand(self, cmd: SleepCommand) -> Outcome:
        if self.activation is not None:  # placement needs the GPUs: as a stop does, this ends the activation
            return self._on_StopCommand(StopCommand(cmd.reason))
        if self.state is State.READY:
            if self._sleep_mode():
                self._drain_then("sleep", cmd.reason)
                return Outcome(True, "draining in-flight requests, then putting the engine to sleep")
            self._drain_then("stop", f"{cmd.reason}; stopped instead of put to sleep: this engine runs without "
                                     f"{SLEEP_MODE_FLAG} (its launch decisions say why)")
            return Outcome(True, "draining in-flight requests, then stopping the engine (it has no sleep mode)")
        if self.state in (State.ASLEEP, State.FALLING_ASLEEP):
            if self.after_stop == "wake":
                self.after_stop = "sleep"
            return Outcome(True, f"the engine is already {self.state.value}")
        return self._on_StopCommand(StopCommand(cmd.reason))

    def _on_RestartCommand(self, cmd: RestartCommand) -> Outcome:
        if self.activation is not None:
            return self._busy_with_activation()
        self.fallback = False  # an admin's restart tries the configured arguments again
        if self.state is State.READY:
            self._note_restart("requested", cmd.reason)
            self._drain_then("start", cmd.reason)
            return Outcome(True, "draining in-flight requests, then restarting the engine")
        if self.state in (State.STARTING, State.CHECKING, State.WAKING, State.ASLEEP):
            self._note_restart("requested", cmd.reason)
            self._stop_then("start", cmd.reason)
            return Outcome(True, "restarting the engine")
        if self.state is State.BACKOFF:
            self.fx.cancel_timer("backoff")
            self._spawn()
            return Outcome(True, "restarting the engine now instead of waiting for the backoff")
        if self.state in (State.STOPPED, State.FAILED):
            self.failures = 0
            self._spawn()
            return Outcome(True, "starting the engine")
        self.after_stop = "start"
        return Outcome(True, "the engine starts again once the current one has stopped")

    def _on_ActivateCommand(self, cmd: ActivateCommand) -> Outcome:
        if self.activation is not None:
            return self._busy_with_activation()
        if cmd.version == self.active_version:
            return Outcome(False, f"plugin version {self._label(cmd.version)} is already active", conflict=True)
        if self.state is not State.READY or self.run is None:
            return Outcome(False, f"a plugin swap needs a ready engine to compare against; the engine is "
                                  f"{self.state.value}. Start it (POST /start) and retry", conflict=True)
        if self.canary_running is not None:
            return self._busy_with_canary()
        self.activation = Activation(self.active_version, cmd.version, from_draft=self.draft_vocab,
                                     to_draft=self.draft_vocab)
        self.fx.measure(self.run.run_id)
        return Outcome(True, f"activating plugin version {self._label(cmd.version)}: measuring the current version "
                             f"first, then restarting on the new one and verifying it")

    def _on_DraftVocabCommand(self, cmd: DraftVocabCommand) -> Outcome:
        if self.activation is not None:
            return self._busy_with_activation()
        if cmd.setting == self.draft_vocab:
            return Outcome(False, f"DraftVocab is already {draft_label(cmd.setting)}", conflict=True)
        if cmd.setting is None:  # off needs no proof: the drafter scores every id again, as stock vLLM does
            self.draft_vocab = None
            self.fx.save_draft_vocab(None)
            if self.state is not State.READY:
                return Outcome(True, f"DraftVocab is off from the next start (the engine is {self.state.value})")
            self._note_restart("requested", "DraftVocab turned off")
            self._drain_then("start", "restarting with DraftVocab off")
            return Outcome(True, "DraftVocab off: draining in-flight requests, then restarting the engine")
        if self.state is not State.READY or self.run is None:
            return Outcome(False, f"a DraftVocab switch needs a ready engine to compare against; the engine is "
                                  f"{self.state.value}. Start it (POST /start) and retry", conflict=True)
        if self.canary_running is not None:
            return self._busy_with_canary()
        self.activation = Activation(self.active_version, self.active_version, kind="draft_vocab",
                                     from_draft=self.draft_vocab, to_draft=cmd.setting)
        self.fx.measure(self.run.run_id)
        return Outcome(True, f"switching DraftVocab to {draft_label(cmd.setting)}: measuring the engine as it runs "
                             f"first, then restarting with it and verifying that decoding got faster")

    def _on_CanaryCommand(self, cmd: CanaryCommand) -> Outcome:
        if self.canary_running is not None:
            return Outcome(True, f"a canary run ({self.canary_running}) is in progress; its verdict is the answer")
        if self.state is not State.READY or self.run is None:
            return Outcome(False, f"a canary needs a ready engine; the engine is {self.state.value}", conflict=True)
        self._ask_canary("on_demand")
        return Outcome(True, "checking the engine's answers: decode against prefill over the canary prompts")

    # Reports of the effects layer ---------------------------------------------------------------------------------

    def _on_Spawned(self, msg: Spawned) -> None:
        if self._current(msg.run_id):
            self.run.pid = msg.pid
            self.run.command = msg.command

    def _on_SpawnFailed(self, msg: SpawnFailed) -> None:
        if self._current(msg.run_id) and self.state is State.STARTING:
            self._engine_failed("start_failed", f"the engine could not be started: {msg.error}")

    def _on_Exited(self, msg: Exited) -> None:
        if not self._current(msg.run_id):
            return
        self.run.returncode = msg.returncode
        if self.state in (State.STARTING, State.CHECKING, State.READY, State.DRAINING, State.FALLING_ASLEEP,
                          State.ASLEEP, State.WAKING):
            detail = self.run.last_fatal or msg.last_line
            why = f": {detail}" if detail else ""
            how = (f"was killed by {_signal_name(-msg.returncode)}" if msg.returncode < 0
                   else f"exited with code {msg.returncode}")
            self._engine_failed("crash", f"the engine {how}{why}")

    def _on_ReadyProbe(self, msg: ReadyProbe) -> None:
        if not (self._current(msg.run_id) and self.state in (State.STARTING, State.WAKING)):
            return
        if msg.ok:
            self._serving()
        elif self.state is State.WAKING:
            self._engine_failed("wake_failed", f"the engine did not serve after waking up: {msg.detail}")
        else:
            self._engine_failed("start_failed", f"the engine did not become ready: {msg.detail}")

    def _on_StartupTimedOut(self, msg: StartupTimedOut) -> None:
        if self._current(msg.run_id) and self.state in (State.STARTING, State.WAKING):
            limit = self.settings.startup_timeout_s
            self._engine_failed("start_failed" if self.state is State.STARTING else "wake_failed",
                                f"the engine was not ready within {limit:g} s (supervisor.startup_timeout_s)")

    def _on_Drained(self, msg: Drained) -> None:
        if not (self._current(msg.run_id) and self.state is State.DRAINING):
            return
        note = f" ({msg.remaining} requests still in flight at the drain timeout)" if msg.remaining else ""
        if self.after_stop == "wake":  # a start came during the drain: it never slept
            self._enter(State.READY, "serving (its sleep was called off)")
        elif self.after_stop == "sleep":
            self._enter(State.FALLING_ASLEEP, self.reason + note)
            self.fx.stop_watching()
            self.fx.sleep(self.run.run_id)
        else:
            self._stop_then(self.after_stop, self.reason + note)

    def _on_Slept(self, msg: Slept) -> None:
        if not (self._current(msg.run_id) and self.state is State.FALLING_ASLEEP):
            return
        if not msg.ok:
            self.last_error = f"the engine did not go to sleep: {msg.detail}"
            self._stop_then("stop", f"{self.reason}; stopped instead: {self.last_error}")
        elif self.after_stop == "wake":
            self._wake()
        elif self.after_stop == "stop":
            self._stop_then("stop", self.reason)
        else:
            self._enter(State.ASLEEP, self.reason)

    def _on_Woke(self, msg: Woke) -> None:
        if not (self._current(msg.run_id) and self.state is State.WAKING):
            return
        if msg.ok:
            self.fx.probe_ready(msg.run_id)
        else:
            self._engine_failed("wake_failed", f"the engine did not wake up: {msg.detail}")

    def _on_StoppedGroup(self, msg: StoppedGroup) -> None:
        if not (self._current(msg.run_id) and self.state is State.STOPPING):
            return
        self.fx.record_run_end(msg.run_id, self.run.returncode, self.reason)
        self.leftovers = bool(msg.leftovers)
        if msg.leftovers:
            self._fail(f"processes of the engine survived SIGKILL: {'; '.join(msg.leftovers)}. A new engine is not "
                       f"started beside them; end them (or reboot if they are stuck in the driver), then "
                       f"{self.start_hint}")
            return
        if self.after_stop == "stop":
            self._enter(State.STOPPED, self.reason)
        elif self.after_stop == "start":
            self._spawn()
        else:
            self._backoff()

    def _on_BackoffElapsed(self, msg: BackoffElapsed) -> None:
        if self.state is State.BACKOFF and self._current(msg.run_id):
            self._spawn()

    def _on_Progress(self, msg: Progress) -> None:
        if not (self._current(msg.run_id) and self.state in (State.READY, State.DRAINING)):
            return
        hung = self.hang.observe(msg, self.clock())
        if hung:
            self._engine_failed("hang", hung)

    def _on_LogLine(self, msg: LogLine) -> None:
        if not self._current(msg.run_id):
            return
        event = msg.event
        if event.kind in ("throughput", "spec_decode"):
            self.latest[event.kind] = event
            return
        self.run.take(event)
        if event.kind == contract.BANNER.kind and self._awaiting_banner():
            self.fx.cancel_timer("banner")
            self._check_banner()

    def _on_BannerTimedOut(self, msg: BannerTimedOut) -> None:
        if self._current(msg.run_id) and self._awaiting_banner():
            self._rollback(f"the plugin banner did not appear within {self.plugin_settings.banner_timeout_s:g} s "
                           f"of the engine being ready: the plugin was not loaded")

    def _on_CanaryDue(self, msg: CanaryDue) -> None:
        if not self._current(msg.run_id) or self.state is not State.READY:
            return
        if self.canary_running is None and self.activation is None:
            self._ask_canary("periodic")
        else:  # busy with a canary or an activation's measurements: the next period
            self._schedule_canary()

    def _on_CanaryChecked(self, msg: CanaryChecked) -> None:
        if not self._current(msg.run_id) or self.canary_running is None:
            return
        verdict = msg.verdict
        self.canary_running = None
        self.canaries += 1
        self.last_canary = verdict
        if verdict.result == "passed":
            self.degraded = None
            self.good_versions = [v for v in self.good_versions if v != self.run.version] + [self.run.version]
        elif verdict.result == "failed":
            self.degraded = verdict
        self.fx.record_canary(verdict, degraded=self.degraded is not None)
        if self.state is State.CHECKING:
            self._after_first_canary(verdict)
        elif self.state is State.READY:
            if verdict.result != "failed" or not self._act_on_failure(verdict):
                self._schedule_canary()

    def _on_Measured(self, msg: Measured) -> None:
        act = self.activation
        if act is None or not self._current(msg.run_id) or self.state is not State.READY:
            return
        if act.phase == "baseline":
            if msg.result is None:
                self._finish_activation("failed", f"measuring the current version failed: {msg.error}; nothing "
                                                  f"was changed")
                return
            act.baseline = msg.result
            act.phase = "switch"
            self._note_restart("activation", self._switch_label(act))
            self._drain_then("start", f"switching to {self._target_label(act, act.phase)}")
        elif act.phase == "verify":
            if msg.result is None:
                self._rollback(f"the verification benchmark failed on the new version: {msg.error}")
                return
            act.candidate = msg.result
            if act.kind == "draft_vocab":
                worse = draft_vocab_shortfall(act.baseline, msg.result, self.plugin_settings)
            else:
                worse = regression(act.baseline, msg.result, self.plugin_settings)
            if worse:
                self._rollback(worse)
            elif act.kind == "draft_vocab":
                self.draft_vocab = act.to_draft
                self.fx.save_draft_vocab(act.to_draft)
                self._finish_activation("activated", f"verified: the engine's DraftVocab line, its canary, "
                                                     f"{act.baseline.tokens_per_s:.1f} -> {msg.result.tokens_per_s:.1f}"
                                                     f" tokens/s and acceptance within plugins.acceptance_margin")
            else:
                self.active_version = act.to_version
                self.fx.save_active_version(act.to_version)
                self._finish_activation("activated", "verified: banner, readiness, smoke completion, throughput "
                                                     "and acceptance within margins")

    # Transitions ------------------------------------------------------------------------------------------------------

    def _spawn(self) -> None:
        version, draft_vocab = self._launch_choice()
        draft = "" if draft_vocab is None else f", DraftVocab {draft_label(draft_vocab)}"
        self._enter(State.STARTING, f"starting on plugin version {self._label(version)}{draft}")
        run = Run(self._run_ids(), version, self.clock())
        self.run = run
        self.canary_running = None  # a canary of the last run no longer reports
        self.fx.record_run(run.run_id, version)
        self.fx.spawn(run.run_id, version, self.fallback, draft_vocab)
        self.fx.probe_ready(run.run_id)
        self.fx.set_timer("startup", self.settings.startup_timeout_s, StartupTimedOut(run.run_id))

    def _serving(self) -> None:
        """The engine answers: check its answers first (canary.enabled), then count it ready."""
        if not self.canary.enabled:
            self._became_ready()
            return
        self.fx.cancel_timer("startup")  # the canary has its own bound (canary.timeout_s)
        act = self.activation
        purpose: Purpose = ("activation" if act is not None and act.phase == "switch"
                            else "wake" if self.state is State.WAKING else "start")
        self._enter(State.CHECKING, f"checking the engine's answers before serving (canary after the {purpose})")
        self._ask_canary(purpose)

    def _after_first_canary(self, verdict: CanaryVerdict) -> None:
        """The verdict of the canary an engine must pass before it counts as ready."""
        act = self.activation
        if act is not None and act.phase == "switch":
            if verdict.result == "passed":
                self._became_ready()
            else:  # a switch is verified: answers it could not check are no better than wrong ones
                self._rollback(_canary_failure(verdict), drain=False)
            return
        if verdict.result == "failed" and act is None and self._act_on_failure(verdict):
            return
        self._became_ready()

    def _act_on_failure(self, verdict: CanaryVerdict) -> bool:
        """canary.action on a failed canary outside an activation; True when the engine is being restarted."""
        why = _canary_failure(verdict)
        self.last_error = why
        action = self.canary.action
        found, target = self._rollback_target()
        if action == "restart" or (action == "rollback" and not found):
            if action == "rollback":
                why += "; canary.action = rollback, but no other plugin version passed a canary here: restarting"
            if self.state is State.CHECKING:  # as a failed start: backoff, and `failed` after max_restarts
                self._engine_failed("canary", why)
            else:
                self._restart_after_canary(f"restarting (canary.action = restart): {why}")
            return True
        if action == "rollback":
            subject = f"plugin rollback {self._label(self.active_version)} -> {self._label(target)}"
            self.fx.record_activation(self.active_version, target, "rolled_back", f"canary.action = rollback: {why}",
                                      {"canary": verdict.as_dict()}, subject)
            self.active_version = target
            self.fx.save_active_version(target)
            self._restart_after_canary(f"rolling back to plugin version {self._label(target)}, the last whose "
                                       f"canary passed (canary.action = rollback): {why}")
            return True
        if action == "fallback" and not self.fallback:
            self.fallback = True
            self._restart_after_canary(f"restarting with canary.fallback_args {' '.join(self.canary.fallback_args)} "
                                       f"(canary.action = fallback): {why}")
            return True
        return False  # alert, or a fallback run failing too: it serves, marked degraded

    def _abandon_baseline(self, reason: str) -> None:
        """A switch still measuring the engine as it runs ends here when that engine goes: nothing was changed."""
        if self.activation is not None and self.activation.phase == "baseline":
            self._finish_activation("failed", f"the engine went while it was measured ({reason}); nothing was "
                                              f"changed: retry once it serves again")

    def _restart_after_canary(self, reason: str) -> None:
        self._abandon_baseline(reason)
        self._note_restart("canary", reason)
        if self.state is State.CHECKING:  # no user request reached it: nothing to drain
            self._stop_then("start", reason)
        else:
            self._drain_then("start", reason)

    def _rollback_target(self) -> tuple[bool, str | None]:
        """(found, version): the last other plugin version whose canary passed here (None = the bundled one)."""
        current = self.run.version if self.run else self.active_version
        others = [version for version in self.good_versions if version != current]
        return (True, others[-1]) if others else (False, None)

    def _ask_canary(self, purpose: Purpose) -> None:
        self.canary_running = purpose
        self.fx.canary(self.run.run_id, purpose)

    def _schedule_canary(self) -> None:
        if self.canary.enabled and self.canary.interval_s > 0:
            self.fx.set_timer("canary", self.canary.interval_s, CanaryDue(self.run.run_id))

    def _became_ready(self) -> None:
        self.fx.cancel_timer("startup")
        if self.run.ready_at is None:  # a wake-up keeps the run's first ready time (its start-up time)
            self.run.ready_at = self.clock()
        self.failures = 0
        self.hang.reset()
        self._enter(State.READY, "serving" if self.degraded is None else "serving, degraded: its canary failed "
                                                                        "(canary.action = alert)")
        self.fx.watch_progress(self.run.run_id)
        self._schedule_canary()
        act = self.activation
        if act is None:
            return
        if act.phase == "switch":
            act.phase = "verify"
            if act.kind == "draft_vocab":
                self._check_draft_vocab()
            elif "plugin_banner" in self.run.markers:
                self._check_banner()
            else:
                self.fx.set_timer("banner", self.plugin_settings.banner_timeout_s, BannerTimedOut(self.run.run_id))
        elif act.phase == "rollback":
            self._finish_activation("rolled_back", act.reason)

    def _drain_then(self, after: AfterStop, reason: str) -> None:
        self._enter(State.DRAINING, reason)
        self.after_stop = after
        self.fx.drain(self.run.run_id, self.settings.drain_timeout_s)

    def _wake(self) -> None:
        self._enter(State.WAKING, "waking up from sleep mode")
        self.after_stop = "stop"
        self.fx.wake(self.run.run_id)
        self.fx.set_timer("startup", self.settings.startup_timeout_s, StartupTimedOut(self.run.run_id))

    def _stop_then(self, after: AfterStop, reason: str) -> None:
        self._enter(State.STOPPING, reason)
        self.after_stop = after
        self.fx.stop_watching()
        self.fx.cancel_timer("startup")
        self.fx.cancel_timer("banner")
        self.fx.stop_group(self.run.run_id)

    def _engine_failed(self, cause: str, reason: str) -> None:
        """A crash, a failed start or a hang: clean up the group, then retry (or roll back an activation)."""
        self.last_error = reason
        self._abandon_baseline(reason)
        act = self.activation
        if act is not None and act.phase in ("switch", "verify"):
            act.phase = "rollback"
            act.reason = reason
            after: AfterStop = "start"
            self._note_restart("rollback", f"rolling back: {reason}")
        elif self.after_stop in ("stop", "sleep") and self.state in (State.DRAINING, State.FALLING_ASLEEP,
                                                                     State.ASLEEP):
            after = "stop"  # a stop (or sleep) was asked for; a crash meanwhile does not turn it into a restart
        else:
            after = "backoff"
            self._failure_cause = cause
        self._stop_then(after, reason)

    def _backoff(self) -> None:
        self.failures += 1
        if self.failures > self.settings.max_restarts:
            self._fail(f"{self.reason}; gave up after {self.failures} consecutive failures "
                       f"(supervisor.max_restarts = {self.settings.max_restarts}). Fix the cause, then "
                       f"{self.start_hint}")
            return
        delay = min(self.settings.backoff_initial_s * 2 ** (self.failures - 1), self.settings.backoff_max_s)
        self._note_restart(self._failure_cause, self.reason)
        self._enter(State.BACKOFF, f"{self.reason}; retrying in {delay:g} s (failure {self.failures} of at most "
                                   f"{self.settings.max_restarts})")
        self.fx.set_timer("backoff", delay, BackoffElapsed(self.run.run_id))

    def _fail(self, reason: str) -> None:
        self.last_error = reason
        if self.activation is not None:
            self._finish_activation("failed", reason)
        self._enter(State.FAILED, reason)

    def _rollback(self, reason: str, drain: bool = True) -> None:
        act = self.activation
        act.phase = "rollback"
        act.reason = reason
        self._note_restart("rollback", f"rolling back: {reason}")
        then = self._drain_then if drain else self._stop_then
        then("start", f"rolling back to {self._target_label(act, 'rollback')}: {reason}")

    def _finish_activation(self, outcome: str, reason: str) -> None:
        act = self.activation
        self.fx.record_activation(act.from_version, act.to_version, outcome, reason,
                                  act.details(self.plugin_settings), self._switch_label(act))
        self.activation = None

    # Checks -----------------------------------------------------------------------------------------------------------

    def _check_banner(self) -> None:
        self.activation.banner_checked = True
        seen = self.run.banner_version
        expected = self._expected_banner(self.activation.to_version)
        if seen != expected:
            self._rollback(f"the engine's plugin banner shows version {seen}, expected {expected}: the new "
                           f"version was not the one loaded")
        else:
            self.fx.measure(self.run.run_id)

    def _check_draft_vocab(self) -> None:
        """The engine logs its DraftVocab line while it builds the drafter, before it serves: it must say active."""
        line = self.run.markers.get(contract.DRAFT_VOCAB_MARKER.kind)
        if line is None or not line.active:
            said = (f"it says: {line.detail}" if line is not None else
                    "its log has no DraftVocab line: the engine builds no MTP drafter (give it an MTP "
                    "--speculative-config) or runs without the plugin (caovan=false)")
            self._rollback(f"the engine did not turn DraftVocab on; {said}")
        else:
            self.fx.measure(self.run.run_id)

    def _awaiting_banner(self) -> bool:
        act = self.activation
        return act is not None and act.phase == "verify" and self.state is State.READY and not act.banner_checked

    # Helpers ----------------------------------------------------------------------------------------------------------

    def _enter(self, state: State, reason: str) -> None:
        """Change the state (checked against the transition table); the gate follows (GATE_ON_ENTRY)."""
        check_transition(self.state, state)
        if state is not self.state:
            self.state_since = self.clock()
        self.state = state
        self.reason = reason
        gate = GATE_ON_ENTRY[state]
        if gate == "open":
            self.fx.gate_open(self.run.run_id)
        elif gate == "hold":
            self.fx.gate_hold()
        elif gate == "failed":
            self.fx.gate_reject(f"the engine has failed: {reason}")
        elif gate == "stopped" and self.on_demand:
            self.fx.gate_idle()
        elif gate == "stopped":
            self.fx.gate_reject("the engine is stopped; POST /start starts it")

    def _sleep_mode(self) -> bool:
        """Whether this run's engine was launched with sleep mode: the effective command of caovan-vllm-serve's
        decisions line (the profile drops the flag where vLLM has no sleep mode)."""
        launch = self.run.launch if self.run else None
        return launch is not None and SLEEP_MODE_FLAG in launch.command

    def _current(self, run_id: int) -> bool:
        return self.run is not None and self.run.run_id == run_id

    def _launch_choice(self) -> tuple[str | None, DraftSetting]:
        """The plugin version and DraftVocab setting of the next start: a switch's while it decides them."""
        decided, version, draft_vocab = self.activation.launch() if self.activation else (False, None, None)
        return (version, draft_vocab) if decided else (self.active_version, self.draft_vocab)

    def _note_restart(self, cause: str, reason: str) -> None:
        self.restarts += 1
        self.fx.record_restart(self.run.run_id if self.run else None, cause, reason)

    def _busy_with_activation(self) -> Outcome:
        act = self.activation
        return Outcome(False, f"a {self._switch_label(act)} ({act.phase}) is in progress; wait for it (GET /status) "
                              f"and retry", conflict=True)

    def _busy_with_canary(self) -> Outcome:
        return Outcome(False, f"a canary run ({self.canary_running}) is checking the engine's answers; retry when its "
                              f"verdict is in (GET /status, canary)", conflict=True)

    def _switch_label(self, act: Activation) -> str:
        if act.kind == "draft_vocab":
            return f"DraftVocab switch {draft_label(act.from_draft)} -> {draft_label(act.to_draft)}"
        return f"plugin activation {self._label(act.from_version)} -> {self._label(act.to_version)}"

    def _target_label(self, act: Activation, phase: str) -> str:
        """What a switch's next start runs: its new side, or on rollback what ran before."""
        back = phase == "rollback"
        if act.kind == "draft_vocab":
            return f"DraftVocab {draft_label(act.from_draft if back else act.to_draft)}"
        return f"plugin version {self._label(act.from_version if back else act.to_version)}"

    def _expected_banner(self, version: str | None) -> str:
        return self.bundled_version if version is None else version

    def _label(self, version: str | None) -> str:
        return f"bundled ({self.bundled_version})" if version is None else version


def _canary_failure(verdict: CanaryVerdict) -> str:
    """A canary that did not pass, in one sentence with its evidence."""
    if verdict.result == "not_run":
        return f"the canary could not check the answers: {verdict.detail}"
    e = verdict.evidence
    gap = f"more than {e.margin:.4g}" if e.at_least else f"{e.margin:.4g}"
    return (f"the canary failed: {verdict.disagreements} of {verdict.tokens} generated tokens disagree with the "
            f"prefill; first at token {e.position} of prompt {e.prompt!r}: decode gave {e.got} {e.got_text!r}, the "
            f"prefill picks {e.expected} {e.expected_text!r}, {gap} ahead in log-probability (tie margin "
            f"{e.tie_margin:g})")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
