"""One configured model's parts: its gate, log sink, metrics view, supervisor (with its state machine) and effects."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.config import Settings
from caovan_manager.engine.effects import EngineEffects
from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker
from caovan_manager.metrics import DaemonMetrics
from caovan_manager.plugins.store import PluginStore
from caovan_manager.proxy.gate import Gate
from caovan_manager.proxy.routes import Route
from caovan_manager.proxy.sampling import greedy_only_reason
from caovan_manager.proxy.token_tally import TokenTally
from caovan_manager.store import Store
from caovan_manager.supervisor.activation import PluginChoice
from caovan_manager.supervisor.actor import Supervisor
from caovan_manager.supervisor.machine import Machine
from caovan_manager.supervisor.messages import DraftSetting

from .catalog import ModelEntry


def file_safe(name: str) -> str:
    """A model's name as one file or folder name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def log_folder(root: Path, name: str, routed: bool) -> Path:
    """A routed model's engine logs get a folder of their own (each sink prunes its folder to its last runs)."""
    return root / file_safe(name) if routed else root


class ModelSlot:
    def __init__(self, entry: ModelEntry, settings: Settings, *, routed: bool, store: Store, plugins: PluginStore,
                 masker: Masker, metrics: DaemonMetrics, events: Broadcaster[dict[str, Any]],
                 run_ids: Callable[[], int], bundled_version: str, plugin: PluginChoice,
                 socket_folder: Path, draft_vocab: DraftSetting = None) -> None:
        self.entry = entry
        self.name = entry.name
        self.masker = masker
        proxy = settings.proxy
        # Its demand and pending-count callbacks are set by the placement owner.
        self.gate = Gate(proxy.queue_size, proxy.queue_wait_s, proxy.retry_after_s)
        self.metrics = metrics.for_model(entry.name)
        self.metrics.bind_gate(lambda: self.gate.waiting, lambda: self.gate.in_flight)
        logs = settings.logs
        self.sink = LogSink(log_folder(settings.log_dir, entry.name, routed), logs.max_bytes, logs.backups,
                            logs.ring_lines, masker, logs.keep_runs, sys.stderr if logs.console else None)
        self.supervisor = Supervisor(self.metrics, events)
        self.effects = EngineEffects(settings, entry.target, self.supervisor.post, self.sink, self.gate, store,
                                     plugins.site_dir, self.metrics, events, masker, socket_folder)
        self.supervisor.attach(Machine(self.effects, settings.supervisor, settings.plugins, settings.canary,
                                       time.monotonic,
                                       bundled_version=bundled_version, plugin=plugin, run_ids=run_ids,
                                       on_demand=routed,
                                       start_hint=f"POST /models/{entry.name}/load" if routed else "POST /start",
                                       draft_vocab=draft_vocab))
        local = Path(entry.target.model)
        self.tally = TokenTally(entry.name, local if local.is_dir() else None,
                                settings.state_dir / "draft-vocab" / f"{file_safe(entry.name)}.json",
                                settings.draft_vocab)
        self.route = Route(entry.name, self.gate, self.effects.engine_headers, self._greedy_only, self.tally)

    @property
    def machine(self) -> Machine:
        return self.supervisor.machine

    def _greedy_only(self) -> str | None:
        launch = self.machine.run.launch if self.machine.run else None
        return greedy_only_reason(launch.decisions) if launch else None

    def launch_command(self) -> list[str]:
        run = self.machine.run
        if run and run.command:
            return run.command
        target = self.entry.target
        return self.masker.command(["python", "-m", "caovan_kernels.serve", target.model, *target.args])

    def effective_command(self) -> list[str]:
        """vLLM's command as `caovan-vllm-serve` ran it (the profile applied); until its decisions line arrives, the
        daemon's own launch command."""
        run = self.machine.run
        if run and run.launch:
            return list(run.launch.command)
        return self.launch_command()

