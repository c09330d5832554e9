"""The real effects: processes, HTTP probes, timers, the proxy gate and the store, driven by the state machine.

Every method returns at once and reports back through `post`, so the supervisor's loop never blocks on I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shlex
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from caovan_kernels.draft_vocab import hot_set
from caovan_manager.broadcaster import Broadcaster
from caovan_manager.canary import conversation
from caovan_manager.canary.verdict import CanaryVerdict, Purpose, not_run
from caovan_manager.config import Settings
from caovan_manager.gpu import wait_gpu_released
from caovan_manager.logwatch.parser import normalise_line, parse_line
from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker
from caovan_manager.metrics import ModelMetrics
from caovan_manager.proxy.gate import Gate
from caovan_manager.proxy.upstream import Upstream, open_upstream
from caovan_manager.store import Store
from caovan_manager.supervisor.messages import (
    CanaryChecked,
    DraftSetting,
    Drained,
    Exited,
    LogLine,
    Measured,
    Message,
    Progress,
    ReadyProbe,
    Slept,
    Spawned,
    SpawnFailed,
    StoppedGroup,
    Woke,
)

from . import probe
from .launch import EngineTarget, build_launch, draft_vocab_in, option_value, with_additional_config
from .process import EngineProcess

logger = logging.getLogger("caovan.canary")
switch_logger = logging.getLogger("caovan.activation")


@dataclass
class RunHandle:
    run_id: int
    upstream: Upstream  # the run's socket and its clients
    process: EngineProcess | None = None
    spawned: asyncio.Event = field(default_factory=asyncio.Event)  # set once the spawn attempt is over
    tasks: set[asyncio.Task] = field(default_factory=set)
    canary: asyncio.Task | None = None  # the run's canary in progress (one at a time)
    last_line: str = ""

    @property
    def client(self) -> httpx.AsyncClient:
        return self.upstream.client


class EngineEffects:
    def __init__(self, settings: Settings, target: EngineTarget, post: Callable[[Message], None], sink: LogSink,
                 gate: Gate, store: Store, site_for: Callable[[str | None], Path | None], metrics: ModelMetrics,
                 events: Broadcaster[dict[str, Any]], masker: Masker, socket_folder: Path) -> None:
        self.settings = settings
        self.target = target
        self.masker = masker
        # Every report carries text from the engine (its lines, its HTTP answers, exception messages): masked here,
        # once, before the supervisor, /status, SQLite or the event stream see it.
        self.post = lambda message: post(masker.deep(message))
        self.sink = sink
        self.gate = gate
        self.store = store
        self.site_for = site_for
        self.metrics = metrics
        self.events = events
        self.socket_folder = socket_folder  # private to the daemon's user (caovan_manager.proxy.upstream)
        self.runs: dict[int, RunHandle] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._progress: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        # The engine's own --api-key, if the user gave one: the daemon's calls to the engine must carry it.
        key = option_value(target.args, "--api-key")
        self.engine_headers = {"Authorization": f"Bearer {key}"} if key else {}

    # Task bookkeeping ---------------------------------------------------------------------------------------------

    def _spawn_task(self, coro: Coroutine[Any, Any, None], run: RunHandle | None = None) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        owner = run.tasks if run is not None else self._tasks
        owner.add(task)
        task.add_done_callback(owner.discard)
        return task

    async def aclose(self) -> None:
        """Cancel everything still pending (the daemon is shutting down; the engine was stopped before)."""
        for handle in self._timers.values():
            handle.cancel()
        tasks = set(self._tasks)
        for run in self.runs.values():
            tasks |= run.tasks
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for run in list(self.runs.values()):
            await run.upstream.aclose()

    # The engine process -------------------------------------------------------------------------------------------

    def spawn(self, run_id: int, version: str | None, fallback: bool = False, draft_vocab: DraftSetting = None) -> None:
        socket_path = self.socket_folder / f"run-{run_id}.sock"
        run = RunHandle(run_id, open_upstream(socket_path, self.settings.proxy, self.engine_headers))
        self.runs[run_id] = run
        self._spawn_task(self._spawn(run, version, fallback, draft_vocab), run)

    async def _spawn(self, run: RunHandle, version: str | None, fallback: bool, draft_vocab: DraftSetting) -> None:
        try:
            site = self.site_for(version)
            run.upstream.socket_path.unlink(missing_ok=True)  # left by a run killed with this id: vLLM would not bind
            cwd = self.settings.state_dir / "run"
            target = self.target
            if fallback:  # after the engine's own arguments: argparse keeps an option's last value
                target = dataclasses.replace(target, args=[*target.args, *self.settings.canary.fallback_args])
            if draft_vocab != draft_vocab_in(target.args):  # the daemon's kept setting wins, off included
                target = dataclasses.replace(target, args=with_additional_config(
                    target.args, {hot_set.SETTING: draft_vocab}))
            spec = build_launch(self.settings, target, run.upstream.socket_path, cwd, site)
            shown = self.masker.command(spec.command)
            self.sink.open_run(run.run_id)
            self.sink.write(f"caovan: run {run.run_id}: {shlex.join(shown)}", source="daemon")
            run.process = await EngineProcess.spawn(spec)
        except Exception as exc:  # noqa: BLE001  (any failure to start is reported, with its message)
            run.spawned.set()
            self.post(SpawnFailed(run.run_id, str(exc) or type(exc).__name__))
            return
        run.spawned.set()
        self.store.record_run_pid(run.run_id, run.process.pid)
        self.post(Spawned(run.run_id, run.process.pid, shown))
        pump = self._spawn_task(run.process.pump_output(lambda line: self._on_line(run, line)), run)
        returncode = await run.process.wait()
        # The last lines usually say why it died; let them reach the supervisor first (the EngineCore may hold the
        # pipe open longer, hence the bound).
        await asyncio.wait({pump}, timeout=0.5)
        self.post(Exited(run.run_id, returncode, run.last_line))

    def _on_line(self, run: RunHandle, line: str) -> None:
        masked = self.sink.write(line)["line"]
        level, message = normalise_line(masked)
        if message.strip() and level not in ("INFO", "DEBUG"):
            # The last warning, error or unprefixed line (a traceback's exception, argparse's complaint) explains an
            # exit best when no fatal line was recognised.
            run.last_line = message.strip()[-500:]
        event = parse_line(masked)
        if event is not None:
            self.post(LogLine(run.run_id, event))

    def probe_ready(self, run_id: int) -> None:
        run = self.runs[run_id]
        self._spawn_task(self._probe_ready(run), run)

    async def _probe_ready(self, run: RunHandle) -> None:
        await run.spawned.wait()
        if run.process is None:
            return
        sup = self.settings.supervisor
        while run.process.process.returncode is None:
            if await probe.health_ok(run.client):
                break
            await asyncio.sleep(sup.ready_poll_s)
        else:
            return  # it exited; Exited tells the supervisor
        error = ""
        for _ in range(3):
            try:
                await probe.smoke_completion(run.client, sup.smoke_prompt, sup.smoke_max_tokens)
                self.post(ReadyProbe(run.run_id, ok=True))
                return
            except probe.UNUSABLE_ANSWER as exc:
                error = str(exc) or type(exc).__name__
                await asyncio.sleep(sup.ready_poll_s)
        self.post(ReadyProbe(run.run_id, ok=False, detail=error))

    def stop_group(self, run_id: int) -> None:
        self._spawn_task(self._stop_group(run_id))

    async def _stop_group(self, run_id: int) -> None:
        run = self.runs.pop(run_id, None)
        if run is None:
            self.post(StoppedGroup(run_id))
            return
        await run.spawned.wait()
        leftovers: list[str] = []
        if run.process is not None:
            pids = {proc.pid for proc in run.process.group_members()}
            leftovers = await run.process.stop(self.settings.supervisor.stop_grace_s)
            if not leftovers:
                held = await wait_gpu_released(pids, self.settings.supervisor.gpu_release_timeout_s)
                leftovers = [f"GPU memory still held by {holder}" for holder in held]
        # The reader and the exit watcher end with the group; give them a moment to deliver the last lines.
        if run.tasks:
            await asyncio.wait(set(run.tasks), timeout=2)
        for task in list(run.tasks):
            task.cancel()
        await asyncio.gather(*run.tasks, return_exceptions=True)
        await run.upstream.aclose()
        run.upstream.socket_path.unlink(missing_ok=True)
        self.post(StoppedGroup(run_id, leftovers))

    def sleep(self, run_id: int) -> None:
        run = self.runs[run_id]
        self._spawn_task(self._sleep_call(run, probe.sleep, Slept), run)

    def wake(self, run_id: int) -> None:
        run = self.runs[run_id]
        self._spawn_task(self._sleep_call(run, probe.wake_up, Woke), run)

    async def _sleep_call(self, run: RunHandle, call: Callable[[httpx.AsyncClient, float], Coroutine[Any, Any, None]],
                          report: type[Slept] | type[Woke]) -> None:
        try:
            await call(run.client, self.settings.supervisor.sleep_timeout_s)
        except probe.NO_ANSWER as exc:
            self.post(report(run.run_id, ok=False, detail=str(exc) or type(exc).__name__))
            return
        self.post(report(run.run_id, ok=True))

    def watch_progress(self, run_id: int) -> None:
        self.stop_watching()
        self._progress = self._spawn_task(self._watch_progress(self.runs[run_id]))

    def stop_watching(self) -> None:
        if self._progress is not None:
            self._progress.cancel()
            self._progress = None

    async def _watch_progress(self, run: RunHandle) -> None:
        interval = self.settings.supervisor.progress_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                sums = await asyncio.wait_for(probe.engine_metrics(run.client), max(interval, 5))
            except (httpx.HTTPError, asyncio.TimeoutError, ValueError) as exc:
                self.post(Progress(run.run_id, ok=False, detail=str(exc) or type(exc).__name__))
                continue
            # The engine's own counts go stale when its core is frozen between two requests, so the requests the
            # proxy is waiting on count too: work is pending whenever either side sees some.
            pending = max(sums.get("vllm:num_requests_running", 0.0) + sums.get("vllm:num_requests_waiting", 0.0),
                          float(self.gate.in_flight))
            self.post(Progress(run.run_id, ok=True, running=pending,
                               generated_total=sums.get("vllm:generation_tokens_total", 0.0)))

    def measure(self, run_id: int) -> None:
        run = self.runs[run_id]
        self._spawn_task(self._measure(run), run)

    async def _measure(self, run: RunHandle) -> None:
        plugins = self.settings.plugins
        try:
            result = await probe.benchmark(run.client, plugins.verify_requests, plugins.verify_max_tokens)
        except probe.UNUSABLE_ANSWER as exc:
            self.post(Measured(run.run_id, None, error=str(exc) or type(exc).__name__))
            return
        self.post(Measured(run.run_id, result))

    def canary(self, run_id: int, purpose: Purpose) -> None:
        run = self.runs[run_id]
        if run.canary is not None:
            run.canary.cancel()
        run.canary = self._spawn_task(self._canary(run, purpose), run)

    async def _canary(self, run: RunHandle, purpose: Purpose) -> None:
        settings = self.settings.canary
        periodic = purpose == "periodic"
        # A periodic run waits for quiet moments (at most busy_wait_s each), the others run at once.
        bound = settings.timeout_s + (settings.busy_wait_s if periodic else 0)
        started = time.monotonic()
        try:
            model = await probe.served_model(run.client)
            # With requests held (a start, a wake-up, an activation) its prefills go out together; otherwise one at a
            # time, so that users' requests never queue behind them.
            verdict = await asyncio.wait_for(conversation.ask(
                run.client, model, settings, purpose, self._quiet_moment if periodic else None,
                one_at_a_time=purpose in ("periodic", "on_demand")), bound)
        except asyncio.TimeoutError:
            verdict = not_run(purpose, settings.tie_margin, f"no verdict within {bound:g} s (canary.timeout_s)",
                              time.monotonic() - started)
        except probe.UNUSABLE_ANSWER as exc:
            verdict = not_run(purpose, settings.tie_margin, f"the canary could not ask the engine: "
                              f"{str(exc) or type(exc).__name__}", time.monotonic() - started)
        self.post(CanaryChecked(run.run_id, dataclasses.replace(verdict, run_id=run.run_id)))

    async def _quiet_moment(self) -> bool:
        """Wait until no user request has been in flight or queued for canary.idle_s; False after busy_wait_s."""
        settings = self.settings.canary
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.busy_wait_s
        quiet_since: float | None = None
        while loop.time() < deadline:
            now = loop.time()
            if self.gate.pending:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            if quiet_since is not None and now - quiet_since >= settings.idle_s:
                return True
            await asyncio.sleep(min(0.1, settings.idle_s or 0.1))
        return False

    # Time ---------------------------------------------------------------------------------------------------------

    def set_timer(self, name: str, delay_s: float, message: Message) -> None:
        self.cancel_timer(name)
        self._timers[name] = asyncio.get_running_loop().call_later(delay_s, self.post, message)

    def cancel_timer(self, name: str) -> None:
        handle = self._timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    # Requests through the proxy -----------------------------------------------------------------------------------

    def gate_open(self, run_id: int) -> None:
        self.gate.open(self.runs[run_id].upstream)

    def gate_hold(self) -> None:
        self.gate.hold("the engine is not ready (restarting or starting)")

    def gate_idle(self) -> None:
        self.gate.idle()

    def gate_reject(self, reason: str) -> None:
        self.gate.reject(reason)

    def drain(self, run_id: int, timeout_s: float) -> None:
        self._spawn_task(self._drain(run_id, timeout_s))

    async def _drain(self, run_id: int, timeout_s: float) -> None:
        self.post(Drained(run_id, await self.gate.wait_idle(timeout_s)))

    # Records ------------------------------------------------------------------------------------------------------

    def record_run(self, run_id: int, version: str | None) -> None:
        self.store.record_run(run_id, version)

    def record_run_end(self, run_id: int, returncode: int | None, reason: str) -> None:
        self.store.record_run_end(run_id, returncode, self.masker.text(reason))

    def record_restart(self, run_id: int | None, cause: str, reason: str) -> None:
        self.store.record_restart(run_id, cause, self.masker.text(reason))
        self.metrics.restarted(cause)

    def record_activation(self, from_version: str | None, to_version: str | None, outcome: str, reason: str,
                          details: dict[str, Any], subject: str) -> None:
        reason, details = self.masker.text(reason), self.masker.deep(details)
        self.store.record_activation(from_version, to_version, outcome, reason, details)
        self.events.publish({"type": "activation", "time": time.time(), "from_version": from_version,
                             "to_version": to_version, "outcome": outcome, "reason": reason, "details": details})
        line = f"caovan: {subject}: {outcome.replace('_', ' ')}: {reason}"
        self.sink.write(line, source="daemon")
        switch_logger.log(logging.INFO if outcome == "activated" else logging.WARNING, "%s (model %s)", line,
                          self.metrics.name)

    def save_active_version(self, version: str | None) -> None:
        self.store.save_active_version(version)

    def save_draft_vocab(self, setting: DraftSetting) -> None:
        self.store.save_draft_vocab(self.metrics.name, setting)

    def record_canary(self, verdict: CanaryVerdict, degraded: bool) -> None:
        self.metrics.canary_checked(verdict, degraded)
        shown = self.masker.deep(verdict.as_dict())
        self.events.publish({**shown, "type": "canary", "time": verdict.at, "model": self.metrics.name,
                             "degraded": degraded})
        line = f"caovan: canary ({verdict.purpose}) {verdict.result.replace('_', ' ')}: {shown['detail']}"
        if verdict.evidence is not None:
            e = shown["evidence"]
            line += (f"; first disagreement: prompt {e['prompt']!r}, token {e['position']}: decode {e['got']} "
                     f"{e['got_text']!r}, prefill {e['expected']} {e['expected_text']!r} (margin "
                     f"{'> ' if e['at_least'] else ''}{e['margin']:.4g})")
        self.sink.write(line, source="daemon")
        logger.log(logging.WARNING if verdict.result != "passed" else logging.INFO, "%s (model %s)", line,
                   self.metrics.name)

    def engine_address(self, run_id: int) -> str | None:
        """Where a run listens (`unix:<socket>`), for /status."""
        run = self.runs.get(run_id)
        return run.upstream.address if run else None

