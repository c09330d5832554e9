"""The log lines users grep for, printed exactly so, once per process each (texts: caovan_kernels.contract)."""

from __future__ import annotations

import logging
import sys

from caovan_kernels import __version__
from caovan_kernels.contract import banner_line

BANNER = banner_line(__version__)

_printed: set[str] = set()
_logger = logging.getLogger("caovan")
if not _logger.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [caovan] %(message)s", "%m-%d %H:%M:%S"))
    _logger.addHandler(_handler)
    _logger.setLevel(logging.INFO)
    _logger.propagate = False


def log(message: str) -> None:
    _logger.info(message)


def emit_once(marker: str) -> None:
    if marker not in _printed:
        _printed.add(marker)
        _logger.info(marker)
