"""The state machines' effects protocols against their real implementations and their recording fakes: a call the
machine may make that one of them lacks fails here, not in a running daemon."""

from __future__ import annotations

import inspect

import pytest

from caovan_manager.engine.effects import EngineEffects
from caovan_manager.models.owner import SlotEffects
from caovan_manager.models.placement import PlacementEffects
from caovan_manager.supervisor.effects import Effects
from tests.caovan_manager.models.test_placement import RecordingPlacementEffects

from .fakes import RecordingEffects


def protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(protocol).items()
            if callable(fn) and not name.startswith("_")}


@pytest.mark.parametrize("protocol,implementations", [
    (Effects, (EngineEffects, RecordingEffects)),
    (PlacementEffects, (SlotEffects, RecordingPlacementEffects)),
])
def test_every_effect_exists_with_the_same_parameters(protocol, implementations):
    methods = protocol_methods(protocol)
    assert methods
    for implementation in implementations:
        for name, signature in methods.items():
            assert hasattr(implementation, name), f"{implementation.__name__} lacks {name}"
            got = list(inspect.signature(getattr(implementation, name)).parameters)
            assert got == list(signature.parameters), (implementation.__name__, name, got)
