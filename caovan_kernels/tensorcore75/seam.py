"""Where TensorCore75 attaches to Triton, without forking or patching its code.

Triton 3.6+ calls `knobs.runtime.add_stages_inspection_hook(backend, stages, options, language, capability)` after
its backend filled the stage table; a hook installed before ours is chained (called after ours, so it sees and may
wrap our stages). From 3.7 Triton also calls the hook with no arguments for its share of the cache key (the disk
cache and the JIT's in-memory one): ours answers with its tag, joined with the earlier hook's answer. Triton 3.4 and
3.5 have no such hook; there the CUDA backend registered in `triton.backends` is replaced by a subclass whose
`add_stages` does the same, which every later compile picks up (`make_backend` looks the class up for each compile).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

StagesHook = Callable[[Any, dict, Any, Any, int], None]  # (backend, stages, options, language, capability)


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a Triton version string ("3.6.0", "3.7.0+git...")."""
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return major, minor


def triton_keys_hook() -> bool:
    """Whether this Triton asks the stage hook for a cache-key share (3.7+); before, the key never sees a hook."""
    import triton

    return version_tuple(triton.__version__) >= (3, 7)


class TritonCompileSeam:
    """Attach `hook` to the running Triton; `detach` restores what was there. `tag` is the hook's cache-key share."""

    def __init__(self, hook: StagesHook, tag: Callable[[], str]) -> None:
        self.hook = hook
        self.tag = tag
        self._detach: Callable[[], None] | None = None

    @property
    def kind(self) -> str:
        from triton import knobs

        return "stage hook" if hasattr(knobs.runtime, "add_stages_inspection_hook") else "backend subclass"

    def attach(self) -> None:
        if self._detach is not None:
            return
        from triton import knobs

        if hasattr(knobs.runtime, "add_stages_inspection_hook"):
            self._detach = _attach_stage_hook(knobs.runtime, self.hook, self.tag())
        else:
            self._detach = _attach_backend_subclass(self.hook)

    def detach(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None


def _attach_stage_hook(runtime: Any, hook: StagesHook, tag: str) -> Callable[[], None]:
    previous = runtime.add_stages_inspection_hook

    def chained(*args: Any) -> tuple[str, str] | None:
        if not args:  # Triton 3.7+: (key share, hash) of the hooks in the chain
            if previous is None:
                return tag, tag
            key, digest = previous()
            return f"{tag}-{key}", f"{tag}-{digest}"
        hook(*args)
        if previous is not None:
            previous(*args)
        return None

    runtime.add_stages_inspection_hook = chained

    def detach() -> None:
        # Only unwind our own link: a hook installed after ours wraps ours and stays the caller's business.
        if runtime.add_stages_inspection_hook is chained:
            runtime.add_stages_inspection_hook = previous

    return detach


def _attach_backend_subclass(hook: StagesHook) -> Callable[[], None]:
    from triton.backends import backends

    registered = backends["nvidia"]
    base = registered.compiler

    class TuringMMABackend(base):  # type: ignore[misc, valid-type]
        def add_stages(self, stages: dict, options: Any, language: Any) -> None:
            super().add_stages(stages, options, language)
            hook(self, stages, options, language, self._parse_arch(options.arch))

    backends["nvidia"] = dataclasses.replace(registered, compiler=TuringMMABackend)

    def detach() -> None:
        if backends["nvidia"].compiler is TuringMMABackend:
            backends["nvidia"] = registered

    return detach
