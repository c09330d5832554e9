"""TensorCore75's autotune pruning (caovan_kernels/tensorcore75/autotune.py) on a real autotuned Triton kernel
(probe_kernels.tuned_matmul_kernel: six configurations, five of them two tiles under several num_stages, one that
spills on sm_75), launched through its autotuner compile-only in a child process (autotune_probe.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sm75.probe import run_probe

ALL = ["BM=32 num_warps=4 num_stages=2", "BM=32 num_warps=4 num_stages=3", "BM=32 num_warps=4 num_stages=4",
       "BM=64 num_warps=4 num_stages=2", "BM=64 num_warps=4 num_stages=3", "BM=128 num_warps=1 num_stages=2"]
FIRST_OF_EACH_TILE = [ALL[0], ALL[3], ALL[5]]
SPILLS = ALL[5]


@pytest.fixture(scope="module")
def sm75(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_probe("sm75", tmp_path_factory.mktemp("cache"), script="autotune_probe.py")


def test_num_stages_twins_of_a_retargeted_kernel_are_compiled_once(sm75: dict) -> None:
    for run in sm75["runs"]:  # two tuning keys, each pruned
        # every compile of the launch, the benchmark's and the final launch's included: one per tile
        assert [c["config"] for c in run["compiled"]] == FIRST_OF_EACH_TILE
        assert {c["decision"] for c in run["compiled"]} == {"mma:fp16"}


def test_a_configuration_that_spills_is_not_timed_when_others_do_not(sm75: dict) -> None:
    for run in sm75["runs"]:
        assert [c["config"] for c in run["compiled"] if c["local_bytes"]] == [SPILLS]
        assert run["timed"] == [ALL[0], ALL[3]]
        assert run["best"] in run["timed"]


def test_one_line_per_kernel_whatever_the_tuning_keys(sm75: dict) -> None:
    assert [line for line in sm75["log"] if " autotune " in line] == [
        "[Caovan TensorCore75] autotune tuned_matmul_kernel: 6 configurations -> 2 timed (3 same code under one stage, "
        "1 spill on sm_75)"]


def test_turning_tensorcore75_off_restores_tritons_autotuner(sm75: dict) -> None:
    assert sm75["restored"]


def test_a_kernel_compiled_for_another_target_is_not_pruned(tmp_path: Path) -> None:
    out = run_probe("sm80", tmp_path, script="autotune_probe.py")
    for run in out["runs"]:
        assert [c["config"] for c in run["compiled"]] == ALL
        assert {c["decision"] for c in run["compiled"]} == {None}
        assert run["timed"] == ALL
    assert not [line for line in out["log"] if " autotune " in line]
