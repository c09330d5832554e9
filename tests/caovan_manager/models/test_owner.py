"""Placement's loop with its models' supervisors: a restart placement leaves to a loaded model's supervisor is
answered with that supervisor's own decision (its refusal during a plugin activation included)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.config import SwapSettings
from caovan_manager.engine.launch import EngineTarget
from caovan_manager.inbox import Outcome
from caovan_manager.models.catalog import Catalog, ModelEntry
from caovan_manager.models.owner import PlacementOwner
from caovan_manager.models.placement import Restart
from caovan_manager.supervisor.messages import Command, RestartCommand, StartCommand
from caovan_manager.supervisor.state import State, StateChanged


class AnsweringSupervisor:
    """Stands in for a model's supervisor: records the commands it is sent and answers each with `answer`."""

    def __init__(self, answer: Outcome) -> None:
        self.answer = answer
        self.followers: list = []
        self.commands: list[Command] = []
        self.posted: list[Command] = []

    async def command(self, command: Command) -> Outcome:
        self.commands.append(command)
        return self.answer

    def post(self, command: Command) -> None:
        self.posted.append(command)


def test_a_restart_in_place_is_answered_by_the_models_supervisor_and_one_not_loaded_by_placement():
    busy = Outcome(False, "a plugin activation (bundled -> 0.2.0, verify) is in progress; wait for it", conflict=True)
    supervisor = AnsweringSupervisor(busy)
    slot = SimpleNamespace(supervisor=supervisor, gate=SimpleNamespace())
    entry = ModelEntry("coder", EngineTarget("/models/coder", []), frozenset({0}))

    async def scenario() -> tuple[Outcome, Outcome]:
        owner = PlacementOwner(Catalog((entry,), routed=True), {"coder": slot}, SwapSettings(), Broadcaster())
        owner.start()
        try:
            not_loaded = await owner.command(Restart("coder", "admin"))
            for state in (State.STARTING, State.READY):
                owner.post(StateChanged("coder", state))
            in_place = await owner.command(Restart("coder", "admin"))
        finally:
            await owner.stop_loop()
        return not_loaded, in_place

    not_loaded, in_place = asyncio.run(scenario())
    assert not_loaded == Outcome(True, "loading coder") and supervisor.posted == [StartCommand("admin")]
    assert in_place == busy and supervisor.commands == [RestartCommand("admin")]
