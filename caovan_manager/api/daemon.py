"""The daemon's parts wired together: settings, store, log sink, gate, metrics, supervisor and its effects."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

import caovan_kernels
from caovan_manager.config import Settings, engine_environment
from caovan_manager.engine.effects import EngineEffects
from caovan_manager.engine.launch import EngineTarget, resolve_target
from caovan_manager.engine.process import kill_orphaned_engine
from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker
from caovan_manager.metrics import DaemonMetrics
from caovan_manager.plugins.store import PluginStore
from caovan_manager.proxy.gate import Gate
from caovan_manager.proxy.relay import OpenAIRelay
from caovan_manager.store import Store
from caovan_manager.supervisor.actor import Supervisor
from caovan_manager.supervisor.bus import Broadcaster
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import StartCommand, State, StopCommand

logger = logging.getLogger("caovan.daemon")


class Daemon:
    def __init__(self, settings: Settings, target: EngineTarget | None = None, autostart: bool = True) -> None:
        self.settings = settings
        self.target = target
        self.autostart = autostart
        self.started_at = time.time()
        self.bundled_version = caovan_kernels.__version__
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(settings.database_path)
        self.plugins = PluginStore(settings.plugin_store_dir)
        self.masker = Masker(settings.secrets())
        self.sink = LogSink(settings.log_dir, settings.logs.max_bytes, settings.logs.backups, settings.logs.ring_lines,
                            self.masker, settings.logs.keep_runs, sys.stderr if settings.logs.console else None)
        self.metrics = DaemonMetrics()
        self.events: Broadcaster[dict[str, Any]] = Broadcaster()
        self.gate: Gate | None = None
        self.effects: EngineEffects | None = None
        self.supervisor = Supervisor(self.metrics, self.events)
        self.relay = OpenAIRelay(settings.proxy, settings.security, self.metrics)
        self.engine_client: httpx.AsyncClient | None = None

    @property
    def machine(self) -> Machine:
        return self.supervisor.machine

    async def start(self, log: Callable[[str], None] = logger.info) -> None:
        """Build the parts that need the running loop, resolve the model, start supervising (and the engine)."""
        proxy = self.settings.proxy
        self.gate = Gate(proxy.queue_size, proxy.queue_wait_s, proxy.retry_after_s)
        self.metrics.bind_gate(lambda: self.gate.waiting, lambda: self.gate.in_flight)
        # The daemon's own calls to the engine (its /metrics page); the OpenAI API goes through the relay.
        self.engine_client = httpx.AsyncClient(timeout=httpx.Timeout(30, connect=proxy.connect_timeout_s))
        await asyncio.to_thread(self.reap_orphans)
        if self.target is None:
            self.target = await asyncio.to_thread(resolve_target, self.settings, log)
        self.masker.add_engine(self.target.args, engine_environment(self.settings, {**self.target.env, **os.environ}))
        active = self.store.active_version()
        if active is not None and not self.plugins.has(active):
            logger.warning("the active plugin version %s is no longer in the store; using the bundled plugin", active)
            active = None
        self.effects = EngineEffects(self.settings, self.target, self.supervisor.post, self.sink, self.gate,
                                     self.store, self.plugins.site_dir, self.metrics, self.events, self.masker)
        self.relay.start(self.gate, self.effects.engine_headers)
        machine = Machine(self.effects, self.settings.supervisor, self.settings.plugins, time.monotonic,
                          bundled_version=self.bundled_version, active_version=active,
                          first_run_id=self.store.next_run_id())
        self.supervisor.attach(machine)
        self.supervisor.start()
        if self.autostart:
            self.supervisor.post(StartCommand("daemon started"))
        else:
            self.gate.reject("the engine is stopped; POST /start starts it")

    async def shutdown(self) -> None:
        """Stop the engine (drain, SIGTERM, SIGKILL, checked) and everything else; leaves no process behind."""
        if self.effects is not None:
            await self.supervisor.command(StopCommand("daemon shutting down"))
            sup = self.settings.supervisor
            budget = min(sup.drain_timeout_s, 10) + sup.stop_grace_s + sup.gpu_release_timeout_s + 20
            stopped = await self.supervisor.wait_for(
                lambda m: m.state in (State.STOPPED, State.FAILED), budget)
            if not stopped:
                logger.error("the engine did not stop within %.0f s; killing its process groups", budget)
            await self.supervisor.stop_loop()
            self.kill_leftover_groups()
            await self.effects.aclose()
        else:
            await self.supervisor.stop_loop()
        await self.relay.aclose()
        if self.engine_client is not None:
            await self.engine_client.aclose()
        self.sink.close()
        self.store.close()

    def reap_orphans(self) -> None:
        """An engine left running by a daemon that died (kill -9, power cut of the service manager) still holds its
        port and GPU memory; end it before starting a new one."""
        for run in self.store.unfinished_runs():
            killed = kill_orphaned_engine(run["pid"])
            reason = "the daemon exited without stopping this engine"
            if killed:
                logger.warning("killed the engine of run %s left by an earlier daemon: %s", run["run_id"],
                               "; ".join(killed))
                reason += "; killed at the next daemon start"
            self.store.record_run_end(run["run_id"], None, reason)

    def kill_leftover_groups(self) -> None:
        for run in self.effects.runs.values():
            if run.process is not None and run.process.group_members():
                run.process.signal_group(signal.SIGKILL)

    def effective_command(self) -> list[str]:
        """vLLM's command as `caovan-vllm-serve` ran it (the profile applied); until its decisions line arrives, the
        daemon's own launch command."""
        run = self.machine.run if self.machine else None
        if run and run.launch:
            return list(run.launch.command)
        return self.launch_command()

    def launch_command(self) -> list[str]:
        run = self.machine.run if self.machine else None
        if run and run.command:
            return run.command
        if self.target is None:
            return []
        return self.masker.command(["python", "-m", "caovan_kernels.serve", self.target.model, *self.target.args])
