"""Autotuning on sm_75 with TensorCore75: time each distinct binary once, and none that spills when one does not.

Triton's autotuner compiles and times every configuration its own pruning (early_config_prune, perf_model) leaves.
On Turing with TensorCore75 much of that is waste: a retargeted kernel is built with one pipeline stage whatever its
num_stages (retarget.py), so configurations differing only there compile to the same code (vLLM's GDN prefill
compiled 101 configurations, 72 s on a 2-core machine, at a user's first engine start); and a configuration whose
binary spills to local memory loses to one that does not. So, after Triton's pruning:

1. per group of configurations identical but for num_stages, one is compiled; if it was retargeted ("mma:..."), it
   alone is timed; otherwise the group stays;
2. the configurations left are compiled (the benchmark reuses these binaries: same arguments, same in-memory
   cache key) and those whose binary uses local memory are dropped, if one that uses none and fits Turing's 64 KB
   of shared memory remains.

A kernel whose binary carries no TensorCore75 decision (not compiled for sm_75) keeps its configurations, and so
does a configuration that does not compile here (Triton's benchmark meets the error as it would have).

Triton has no knob for this: while TensorCore75 is attached, `Autotuner.prune_configs` (called once per tuning key,
after `Autotuner.run` set `nargs`) is wrapped at class level, its own pruning first, and restored on detach, as
seam.py and cache.py do for theirs. One line per kernel is logged (contract.tensorcore75_autotune_line).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from caovan_kernels import contract

from .pipeline import LOCAL_BYTES_KEY, METADATA_KEY, TURING_SHARED_BYTES, parse_decision

C = TypeVar("C")


@dataclass(frozen=True)
class Built:
    """What pruning needs from one configuration's binary."""

    decision: str | None  # METADATA_KEY's value; None: not compiled for sm_75 with TensorCore75
    local_bytes: int | None  # None: the pipeline could not read the binary
    shared_bytes: int
    hash: str  # Triton's key of the binary (metadata "hash")


@dataclass(frozen=True)
class Choice:
    timed: tuple[int, ...]  # indices of the configurations left to time, in the autotuner's order
    binaries: tuple[str | None, ...]  # their binaries' hashes (None: did not compile here)
    same_code: int
    spilling: int


def stage_free_key(config: Any) -> tuple:
    """What makes two configurations compile differently under the retarget: all but num_stages (and the pre-hook,
    part of a Config's identity)."""
    return (tuple((k, v) for k, v in config.all_kwargs().items() if k != "num_stages"), config.pre_hook)


def choose(configs: Sequence[C], key: Callable[[C], Any], build: Callable[[C], Built | None]) -> Choice | None:
    """Which of `configs` to time (see the module docstring); None: none was compiled for sm_75 with TensorCore75
    (another target, or none compiled at all), leave them all. `build` compiles one configuration (None if it did not
    compile)."""
    groups: dict[Any, list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(key(config), []).append(i)
    built: dict[int, Built | None] = {}
    timed: list[int] = []
    same_code = 0
    for members in groups.values():
        first = built[members[0]] = build(configs[members[0]])
        if first is not None and first.decision is None:
            return None
        if first is not None and parse_decision(first.decision)[0]:
            timed.append(members[0])
            same_code += len(members) - 1
        else:
            timed.extend(members)
    if all(b is None for b in built.values()):
        return None
    timed.sort()
    for i in timed:
        if i not in built:
            built[i] = build(configs[i])
    spilling = {i for i in timed if (b := built[i]) is not None and b.local_bytes}
    clean = [i for i in timed if (b := built[i]) is not None and b.local_bytes == 0
             and b.shared_bytes <= TURING_SHARED_BYTES]
    if not clean:
        spilling = set()
    kept = tuple(i for i in timed if i not in spilling)
    return Choice(kept, tuple(None if built[i] is None else built[i].hash for i in kept), same_code, len(spilling))


@dataclass(frozen=True)
class Pruned:
    """One pruning: an autotuner's configurations for one tuning key."""

    kernel: str
    configs: int  # what Triton's own pruning left
    timed: tuple[Any, ...]  # the Configs left to time
    binaries: tuple[str | None, ...]  # their binaries' hashes, compiled here
    same_code: int
    spilling: int

    def line(self) -> str:
        return contract.tensorcore75_autotune_line(self.kernel, self.configs, len(self.timed), self.same_code,
                                                   self.spilling)


def compile_config(autotuner: Any, kwargs: dict, config: Any) -> Built | None:
    """Compile `config` as the autotuner's benchmark would launch it, without launching (JIT warmup: the same
    in-memory cache entry the benchmark then finds); None if it does not compile or Triton's hooks skipped it."""
    call = {**autotuner.nargs, **kwargs, **config.all_kwargs(), "warmup": True}
    call.setdefault("grid", None)  # Autotuner.warmup prunes without a grid
    try:
        kernel = autotuner.fn.run(**call)
        if hasattr(kernel, "result"):  # Triton's async compile mode hands back a future
            kernel = kernel.result()
    # Whatever fails here fails again in the benchmark, which handles it as it would without us.
    except Exception:  # noqa: BLE001
        return None
    if kernel is None:
        return None
    meta = kernel.metadata
    return Built(getattr(meta, METADATA_KEY, None), getattr(meta, LOCAL_BYTES_KEY, None), meta.shared, meta.hash)


class AutotunePruning:
    """Attach/detach the pruning to Triton's Autotuner class; `observer`, if set, sees every pruning (the survey)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._logged: set[str] = set()  # kernels whose line was logged: once per kernel, not per tuning key
        self._restore: Callable[[], None] | None = None
        self.observer: Callable[[Pruned], None] | None = None

    def attach(self) -> None:
        if self._restore is not None:
            return
        from triton.runtime.autotuner import Autotuner

        original = Autotuner.prune_configs

        def prune_configs(autotuner: Any, kwargs: dict, *rest: Any, **named: Any) -> list:
            return self.prune(autotuner, kwargs, original(autotuner, kwargs, *rest, **named))

        Autotuner.prune_configs = prune_configs

        def restore() -> None:
            # Only our own wrapper is undone: one installed over it stays its owner's business.
            if Autotuner.prune_configs is prune_configs:
                Autotuner.prune_configs = original

        self._restore = restore

    def detach(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def prune(self, autotuner: Any, kwargs: dict, configs: list) -> list:
        if len(configs) < 2 or getattr(autotuner, "nargs", None) is None:
            return configs
        kernel = autotuner.base_fn.__name__
        try:
            choice = choose(configs, stage_free_key, lambda config: compile_config(autotuner, kwargs, config))
        # Pruning saves time; an autotuner it cannot read (a new Config field, unhashable values) is left as it was.
        except Exception as exc:  # noqa: BLE001
            self._log_once(kernel, f"{contract.TENSORCORE75} autotune {kernel}: configurations left as they were "
                                   f"({type(exc).__name__}: {exc})")
            return configs
        if choice is None:
            return configs
        pruned = Pruned(kernel, len(configs), tuple(configs[i] for i in choice.timed), choice.binaries,
                        choice.same_code, choice.spilling)
        self._log_once(kernel, pruned.line())
        if self.observer is not None:
            self.observer(pruned)
        return list(pruned.timed)

    def _log_once(self, kernel: str, line: str) -> None:
        with self._lock:
            first = kernel not in self._logged
            self._logged.add(kernel)
        if first:
            self._log(line)
