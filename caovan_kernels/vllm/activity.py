"""Proof that GDNCore runs inside the engine: the two activity markers and call counters in the log."""

from __future__ import annotations

from .markers import emit_once, log

REAL_PREFILL = "[Caovan GDNCore] ACTIVE REAL PREFILL"
DISPATCH = "Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed"

_calls = {"prefill": 0, "decode": 0}


def record(kind: str) -> None:
    """Count a GDNCore call; print the marker on the first, and the counters at 1, 10, 100, ... calls."""
    _calls[kind] += 1
    emit_once(REAL_PREFILL if kind == "prefill" else DISPATCH)
    count = _calls[kind]
    if count == 10 ** (len(str(count)) - 1):
        log(f"[Caovan GDNCore] kernel calls: prefill={_calls['prefill']} decode={_calls['decode']}")
