"""The daemon's parts wired together: settings, store, metrics, the models (each with its gate, log sink,
supervisor and effects), their placement owner and the relay's router."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import caovan_kernels
from caovan_manager.broadcaster import Broadcaster
from caovan_manager.config import Settings, engine_environment
from caovan_manager.engine.launch import EngineTarget, draft_vocab_in
from caovan_manager.engine.process import (
    EXIT_WAIT_S,
    SIGKILL_WAIT_S,
    kill_orphaned_engine,
)
from caovan_manager.keys import exposure_warnings
from caovan_manager.masking import Masker
from caovan_manager.metrics import DaemonMetrics
from caovan_manager.models.catalog import Catalog, ModelEntry, build_catalog
from caovan_manager.models.owner import PlacementOwner
from caovan_manager.models.placement import Preload
from caovan_manager.models.router import ModelRouter
from caovan_manager.models.slot import ModelSlot
from caovan_manager.plugins.store import PluginStore
from caovan_manager.proxy.relay import OpenAIRelay
from caovan_manager.proxy.upstream import make_socket_folder, remove_socket_folder
from caovan_manager.store import Store
from caovan_manager.supervisor.activation import PluginChoice
from caovan_manager.supervisor.messages import DraftSetting, StopCommand
from caovan_manager.supervisor.recent import RecentEvents
from caovan_manager.supervisor.state import State

logger = logging.getLogger("caovan.daemon")


def build_embedded_model(log: Callable[[str], None]) -> Path:
    """The embedded default's folder, built (trained) on first use and cached."""
    import caovan_demo  # torch and transformers: imported only when a model is to be built

    return caovan_demo.build(log=log)


class Daemon:
    """The daemon's parts. The single-engine endpoints (/start, /stop, /restart, plugins, /status's top level) act
    on the primary model: the only one without a models table, the table's first entry with one."""

    def __init__(self, settings: Settings, target: EngineTarget | None = None, autostart: bool = True) -> None:
        self.settings = settings
        self.given_target = target
        self.autostart = autostart
        self.started_at = time.time()
        self.bundled_version = caovan_kernels.__version__
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(settings.database_path)
        self.plugins = PluginStore(settings.plugin_store_dir)
        self.masker = Masker(settings.secrets())
        self.metrics = DaemonMetrics()
        self.recent_events = RecentEvents()  # sent to each new /events subscriber first
        self.events: Broadcaster[dict[str, Any]] = Broadcaster(record=self.recent_events.record)
        self.relay = OpenAIRelay(settings.security, self.metrics, settings.proxy.max_body_mib << 20)
        self.socket_folder: Path | None = None  # the engines' private Unix sockets (caovan_manager.proxy.upstream)
        self.catalog: Catalog | None = None
        self.slots: dict[str, ModelSlot] = {}
        self.placement: PlacementOwner | None = None
        self.router: ModelRouter | None = None
        # Told once the daemon serves: when the engine is ready (one model), or at start (models load on demand).
        self.ready_callbacks: list[Callable[[], None]] = []

    # The primary model's parts ----------------------------------------------------------------------------------------

    @property
    def primary(self) -> ModelSlot:
        return self.slots[self.catalog.primary.name]

    def slot(self, model: str | None) -> ModelSlot:
        """The slot of a model's name or alias (None: the primary); raises UnknownModel."""
        return self.primary if model is None else self.slots[self.catalog.get_named(model).name]

    # Life -------------------------------------------------------------------------------------------------------------

    async def start(self, log: Callable[[str], None] = logger.info) -> None:
        """Resolve the models, build each one's parts, start supervising (and the engines that start at once)."""
        self.socket_folder = make_socket_folder()
        for warning in exposure_warnings(self.settings):
            logger.warning("SECURITY: %s (README, Security)", warning)
        await asyncio.to_thread(self.reap_orphans)
        self.catalog = await asyncio.to_thread(build_catalog, self.settings, lambda: build_embedded_model(log), self.given_target)
        for entry in self.catalog:
            self.masker.add_engine(entry.target.args, engine_environment(
                self.settings, {**entry.target.env, **os.environ, **entry.target.env_overrides}))
        active = self.store.active_version()
        if active is not None and not self.plugins.has(active):
            logger.warning("the active plugin version %s is no longer in the store; using the bundled plugin", active)
            active = None
        run_ids = itertools.count(self.store.next_run_id())
        plugin = PluginChoice(active)  # one plugin version for every model's engine
        for entry in self.catalog:
            self.slots[entry.name] = ModelSlot(
                entry, self.settings, routed=self.catalog.routed, store=self.store, plugins=self.plugins,
                masker=self.masker, metrics=self.metrics, events=self.events, run_ids=lambda: next(run_ids),
                bundled_version=self.bundled_version, plugin=plugin, socket_folder=self.socket_folder,
                draft_vocab=self._draft_vocab(entry))
        self.placement = PlacementOwner(self.catalog, self.slots, self.settings.swap, self.events)
        self.router = ModelRouter(self.catalog, self.slots)
        self.relay.start(self.router)
        for slot in self.slots.values():
            slot.supervisor.start()
            slot.tally.start()
        self.placement.start()
        # One model is a catalog of one: placement starts what is preloaded (the single engine is) either way. Until
        # then a stopped engine's requests wait for it to load (a models table) or are refused with how to start it.
        for slot in self.slots.values():
            if self.catalog.routed:
                slot.gate.idle()
            elif not self.autostart:
                slot.gate.reject("the engine is stopped; POST /start starts it")
        if not self.catalog.routed:  # the daemon serves once its one engine is ready
            self.primary.supervisor.ready_callbacks.extend(self.ready_callbacks)
        if self.autostart:
            outcome = await self.placement.command(Preload())
            (logger.info if outcome.accepted else logger.warning)("models: %s", outcome.message)
        if self.catalog.routed:  # the daemon serves now: each model loads on request
            for callback in self.ready_callbacks:
                callback()

    async def shutdown(self) -> None:
        """Stop every engine (drain, SIGTERM, SIGKILL, checked) and everything else; leaves no process behind."""
        if self.placement is not None:
            await self.placement.stop_loop()
        if self.slots:
            await asyncio.gather(*(self._stop_slot(slot) for slot in self.slots.values()))
        if self.socket_folder is not None:
            remove_socket_folder(self.socket_folder)
        for slot in self.slots.values():
            await slot.tally.aclose()
            slot.sink.close()
        self.store.close()

    def _draft_vocab(self, entry: ModelEntry) -> DraftSetting:
        """The DraftVocab setting a model's engines start with: the one the daemon kept for it (a verified switch,
        or off), else what its engine arguments say."""
        found, kept = self.store.draft_vocab(entry.name)
        return kept if found else draft_vocab_in(entry.target.args)

    async def _stop_slot(self, slot: ModelSlot) -> None:
        await slot.supervisor.command(StopCommand("daemon shutting down"))
        sup = self.settings.supervisor
        # The drain (bounded at shutdown), SIGTERM's grace, SIGKILL and a slow exit, the GPU release, a margin.
        budget = (min(sup.drain_timeout_s, 10) + sup.stop_grace_s + SIGKILL_WAIT_S + EXIT_WAIT_S
                  + sup.gpu_release_timeout_s + 20)
        stopped = await slot.supervisor.wait_for(lambda m: m.state in (State.STOPPED, State.FAILED), budget)
        if not stopped:
            logger.error("the engine of %s did not stop within %.0f s; killing its process groups", slot.name, budget)
        await slot.supervisor.stop_loop()
        for run in slot.effects.runs.values():
            if run.process is not None and run.process.group_members():
                run.process.signal_group(signal.SIGKILL)
        await slot.effects.aclose()

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
