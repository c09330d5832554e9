"""Entry point vLLM calls (with no arguments) in each of its processes."""

from __future__ import annotations

from .markers import BANNER, emit_once


def register() -> None:
    # Cheap by design: vLLM runs this in the API server, the engine core and every worker.
    emit_once(BANNER)
