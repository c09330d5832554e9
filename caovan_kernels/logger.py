"""The "caovan" logger every part of the plugin writes through: stderr, in the one format the daemon's log parser
reads (`INFO mm-dd hh:mm:ss [caovan] message`), whatever vLLM does with its own loggers."""

from __future__ import annotations

import logging
import sys

_logger = logging.getLogger("caovan")
if not _logger.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [caovan] %(message)s", "%m-%d %H:%M:%S"))
    _logger.addHandler(_handler)
    _logger.setLevel(logging.INFO)
    _logger.propagate = False


def log(message: str) -> None:
    _logger.info(message)
