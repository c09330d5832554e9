"""The log lines users grep for, printed exactly so, once per process each (texts: caovan_kernels.contract)."""

from __future__ import annotations

from caovan_kernels import __version__
from caovan_kernels.contract import banner_line
from caovan_kernels.logger import log

BANNER = banner_line(__version__)

_printed: set[str] = set()


def emit_once(marker: str) -> None:
    if marker not in _printed:
        _printed.add(marker)
        log(marker)
