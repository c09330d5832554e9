"""One kernel's compile for sm_75 with TensorCore75: which stages run, and the way back to Triton's own lowering.

Triton builds a kernel as a chain of stages (ttir -> ttgir -> llir -> ptx -> cubin). For a kernel whose dots qualify
(eligibility.py), the ttgir stage is the retargeted one (retarget.py). If anything after that fails or shows an
instruction sm_75 lacks, the kernel is rebuilt from its saved TTIR with Triton's own stages, so a retargeting problem
costs speed, never a failed compile. The decision is written into the kernel's metadata (METADATA_KEY), which Triton
stores with the binary: the census reads it back for kernels loaded from the cache too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .eligibility import classify
from .retarget import RetargetRefused, check_llir, parse_module, turing_mma_ttgir

METADATA_KEY = "caovan_tc75"
# A block may use at most 64 KB of shared memory on Turing: a retargeted kernel that needs more would not launch
# there, while Triton's own lowering of it might.
TURING_SHARED_BYTES = 64 * 1024
_RETARGETED = "mma"  # metadata values: "mma:fp16", "kept:fp32_dot", "kept:fallback", ...
_ORDER = ("ttgir", "llir", "ptx", "cubin")

Stage = Callable[[Any, dict], Any]
FallbackReport = Callable[[str, str], None]  # (kernel name, what failed)


def decision_text(retargeted: bool, reason: str) -> str:
    return f"{_RETARGETED if retargeted else 'kept'}:{reason}"


def parse_decision(text: str) -> tuple[bool, str]:
    kind, _, reason = text.partition(":")
    return kind == _RETARGETED, reason


class KernelCompile:
    """Stage functions for one sm_75 compile; `install` puts them into Triton's stage table."""

    def __init__(self, backend: Any, stages: dict[str, Stage], options: Any, int8: bool,
                 on_fallback: FallbackReport) -> None:
        self.backend = backend
        self.options = options
        self.stock = dict(stages)
        self.int8 = int8
        self.on_fallback = on_fallback
        self.ttir_text: str | None = None  # set while the kernel is on the retargeted path
        self.context: Any = None
        self.kernel = "kernel"

    def install(self, stages: dict[str, Stage]) -> None:
        stages["ttgir"] = self.ttgir
        for name in _ORDER[1:]:
            if name in stages:
                stages[name] = self._later(name)

    def ttgir(self, src: Any, metadata: dict) -> Any:
        text = str(src)
        verdict = classify(text, int8=self.int8)
        if not verdict.retarget:
            metadata[METADATA_KEY] = decision_text(False, verdict.reason)
            return self.stock["ttgir"](src, metadata)
        self.ttir_text, self.context, self.kernel = text, src.context, src.get_entry_func_name()
        try:
            module = turing_mma_ttgir(self.backend, src, metadata, self.options)
        except RetargetRefused as refused:
            return self._fall_back(metadata, "ttgir", refused.what)
        metadata[METADATA_KEY] = decision_text(True, verdict.reason)
        return module

    def _later(self, name: str) -> Stage:
        def stage(src: Any, metadata: dict) -> Any:
            if self.ttir_text is None:
                return self.stock[name](src, metadata)
            try:
                out = self.stock[name](src, metadata)
                if name == "llir":
                    check_llir(out)
                    if metadata["shared"] > TURING_SHARED_BYTES:
                        raise RetargetRefused(f"{metadata['shared']} bytes of shared memory, Turing has "
                                              f"{TURING_SHARED_BYTES} per block")
                return out
            # Any failure of the retargeted path (a lowering error, ptxas refusing the PTX) sends the kernel back to
            # Triton's own lowering: a slower kernel beats a failed compile in a user's engine.
            except Exception as exc:  # noqa: BLE001
                what = exc.what if isinstance(exc, RetargetRefused) else f"{type(exc).__name__} in the {name} stage"
                return self._fall_back(metadata, name, what)

        return stage

    def _fall_back(self, metadata: dict, upto: str, what: str) -> Any:
        """Triton's own stages from the saved TTIR up to and including `upto`."""
        text, self.ttir_text = self.ttir_text, None
        metadata[METADATA_KEY] = decision_text(False, "fallback")
        self.on_fallback(self.kernel, what)
        out = parse_module(text, self.context)
        for name in _ORDER[: _ORDER.index(upto) + 1]:
            out = self.stock[name](out, metadata)
        return out
