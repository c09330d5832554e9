"""GDNCore's dispatch watcher on CUDA: it reads the GPU's decode-step counter often while the count moves and
backs off while the engine is idle, so an idle engine sees one small copy a minute, not two a second."""

from __future__ import annotations

import pytest

from caovan_kernels.contract import DISPATCH, device_steps_line
from caovan_kernels.vllm import activity, markers


class ScriptedPrefills:
    """Stands in for the watcher's prefill event: records each wait and says whether a prefill came during it."""

    def __init__(self, prefill_during: set[int]) -> None:
        self.waits: list[float] = []
        self._prefill_during = prefill_during

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return len(self.waits) - 1 in self._prefill_during

    def clear(self) -> None:
        pass


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(activity, "log", lines.append)
    monkeypatch.setattr(markers, "log", lines.append)
    monkeypatch.setattr(markers, "_printed", set())
    return lines


def _watch(counts: list[int], prefill_during: set[int] = frozenset()) -> ScriptedPrefills:
    event = ScriptedPrefills(set(prefill_during))
    values = iter(counts)
    activity.watch_device_steps(lambda: next(values), event, shortest_s=0.001, longest_s=0.064, reads=len(counts))
    return event


def test_an_idle_engine_is_read_less_and_less_often_down_to_the_longest_wait(logged: list[str]) -> None:
    event = _watch([0] * 9)
    assert event.waits == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.064, 0.064]
    assert logged == []  # no step, no marker


def test_moving_counts_keep_the_shortest_wait_and_each_power_of_ten_is_logged_once(logged: list[str]) -> None:
    event = _watch([0, 0, 3, 12, 40, 120, 120, 120])
    assert event.waits == [0.001, 0.002, 0.004, 0.001, 0.001, 0.001, 0.001, 0.002]
    assert logged == [DISPATCH, device_steps_line(3), device_steps_line(12), device_steps_line(120)]


def test_a_prefill_brings_an_idle_watcher_back_to_its_shortest_wait(logged: list[str]) -> None:
    event = _watch([5] * 8, prefill_during={5})
    # 5 new steps at the first read (shortest again), then idle: doubling; the prefill during the 6th wait resets
    # it although the count has not moved (the decode steps it brings follow within moments).
    assert event.waits == [0.001, 0.001, 0.002, 0.004, 0.008, 0.016, 0.001, 0.002]
    assert logged == [DISPATCH, device_steps_line(5)]
