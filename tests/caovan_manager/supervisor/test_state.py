"""The transition table: every state has a row, and a change along an edge it does not draw is refused."""

from __future__ import annotations

import pytest

from caovan_manager.errors import IllegalTransition
from caovan_manager.supervisor.state import (
    GATE_ON_ENTRY,
    TRANSITIONS,
    State,
    StateChanged,
    check_transition,
)


def test_every_state_has_a_row_and_every_edge_ends_in_a_state():
    assert set(TRANSITIONS) == set(State)
    assert all(targets <= set(State) for targets in TRANSITIONS.values())


@pytest.mark.parametrize("before", list(State))
def test_a_change_is_allowed_exactly_along_the_tables_edges_or_staying_put(before):
    for after in State:
        if after is before or after in TRANSITIONS[before]:
            check_transition(before, after)
        else:
            with pytest.raises(IllegalTransition, match=f"illegal state change {before.value} -> {after.value}"):
                check_transition(before, after)


def test_a_state_change_is_published_as_the_events_streams_line():
    change = StateChanged("coder", State.READY, previous=State.STARTING, reason="serving", run_id=7, restarts=2,
                          at=12.5)
    assert change.event() == {"type": "state", "time": 12.5, "model": "coder", "state": "ready", "reason": "serving",
                              "run_id": 7, "restarts": 2}


def test_the_gate_has_a_rule_for_entering_every_state():
    assert set(GATE_ON_ENTRY) == set(State)
    assert GATE_ON_ENTRY[State.READY] == "open" and GATE_ON_ENTRY[State.FAILED] == "failed"
    # A state whose gate rule is "keep" is only entered from states whose rule already holds the requests.
    for state, rule in GATE_ON_ENTRY.items():
        if rule == "keep":
            sources = [before for before, targets in TRANSITIONS.items() if state in targets]
            assert sources and all(GATE_ON_ENTRY[before] == "hold" for before in sources), state
