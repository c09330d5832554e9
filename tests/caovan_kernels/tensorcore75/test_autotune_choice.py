"""The pruning rule of caovan_kernels/tensorcore75/autotune.py (`choose`) on its edge cases, with configurations
named "<tile>/<stages>" and binaries described as the pipeline records them. The rule on a real autotuned Triton
kernel, compiled for sm_75, is tests/sm75/test_autotune_pruning.py."""

from __future__ import annotations

from caovan_kernels.tensorcore75.autotune import Built, choose


def _tile(config: str) -> str:
    return config.split("/")[0]  # what a configuration is once its num_stages is set aside


def _built(binaries: dict[str, Built | None]):
    compiled: list[str] = []

    def build(config: str) -> Built | None:
        compiled.append(config)
        return binaries[config]

    return build, compiled


MMA, CLEAN = "mma:fp16", 0


def _binary(config: str, decision: str | None = MMA, local: int | None = CLEAN, shared: int = 16384) -> Built:
    return Built(decision, local, shared, f"hash-{config}")


def test_twins_of_a_retargeted_kernel_are_compiled_and_timed_once() -> None:
    configs = ["a/2", "a/3", "a/4", "b/2", "b/3"]
    build, compiled = _built({c: _binary(c) for c in configs})
    choice = choose(configs, _tile, build)
    assert compiled == ["a/2", "b/2"]
    assert choice.timed == (0, 3) and choice.binaries == ("hash-a/2", "hash-b/2")
    assert (choice.same_code, choice.spilling) == (3, 0)


def test_a_kept_kernel_keeps_its_twins_and_loses_what_spills() -> None:
    configs = ["a/2", "a/3", "b/2"]
    build, compiled = _built({"a/2": _binary("a/2", "kept:fp32_dot"), "a/3": _binary("a/3", "kept:fp32_dot", 96),
                              "b/2": _binary("b/2", "kept:fp32_dot")})
    choice = choose(configs, _tile, build)
    assert compiled == ["a/2", "b/2", "a/3"]
    assert choice.timed == (0, 2) and (choice.same_code, choice.spilling) == (0, 1)


def test_spilling_configurations_stay_when_none_is_spill_free_within_64_kb() -> None:
    configs = ["a/2", "b/2", "c/2"]
    build, _ = _built({"a/2": _binary("a/2", local=72), "b/2": _binary("b/2", local=2488),
                       "c/2": _binary("c/2", shared=96 * 1024)})  # spill-free, but Turing cannot launch it
    choice = choose(configs, _tile, build)
    assert choice.timed == (0, 1, 2) and choice.spilling == 0


def test_what_does_not_compile_or_cannot_be_read_is_timed_as_before() -> None:
    configs = ["a/2", "a/3", "b/2", "c/2"]
    build, compiled = _built({"a/2": None, "a/3": _binary("a/3"), "b/2": _binary("b/2", local=None),
                              "c/2": _binary("c/2", local=40)})
    choice = choose(configs, _tile, build)
    # a/2 failed: its group is not known to be one binary, so a/3 is compiled and timed too; b/2's local memory is
    # unknown: kept; c/2 spills while a/3 does not: dropped
    assert compiled == ["a/2", "b/2", "c/2", "a/3"]
    assert choice.timed == (0, 1, 2) and choice.binaries == (None, "hash-a/3", "hash-b/2") and choice.spilling == 1


def test_kernels_not_compiled_for_sm75_with_tensorcore75_are_left_alone() -> None:
    configs = ["a/2", "a/3"]
    build, compiled = _built({"a/2": _binary("a/2", decision=None), "a/3": _binary("a/3", decision=None)})
    assert choose(configs, _tile, build) is None and compiled == ["a/2"]
    build, _ = _built({"a/2": None, "a/3": None})
    assert choose(configs, _tile, build) is None
