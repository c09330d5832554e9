"""Where the engine's output goes: a rotated log file per run, an in-memory ring buffer, and live subscribers."""

from __future__ import annotations

import logging
import logging.handlers
import time
from collections import deque
from pathlib import Path
from typing import TextIO

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.masking import Masker


class LogSink:
    def __init__(self, directory: Path, max_bytes: int, backups: int, ring_lines: int, masker: Masker,
                 keep_runs: int = 50, console: TextIO | None = None) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.backups = backups
        self.keep_runs = keep_runs
        self.console = console
        self.ring: deque[dict] = deque(maxlen=ring_lines)
        self.live: Broadcaster[dict] = Broadcaster()
        self._masker = masker
        self._handler: logging.handlers.RotatingFileHandler | None = None
        self._run_id: int | None = None
        self.path: Path | None = None

    def open_run(self, run_id: int) -> Path:
        """Start the log file of a run: engine-<run>.log beside the earlier runs' files."""
        self.close()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"engine-{run_id:05d}.log"
        self._handler = logging.handlers.RotatingFileHandler(
            self.path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._run_id = run_id
        self._prune()
        return self.path

    def _prune(self) -> None:
        """The files of runs older than the last keep_runs go: the log folder stays bounded however many restarts."""
        runs = sorted({path.name.split(".")[0] for path in self.directory.glob("engine-*.log*")})
        for old in runs[:-self.keep_runs]:
            for path in self.directory.glob(f"{old}.log*"):
                path.unlink(missing_ok=True)

    def write(self, line: str, source: str = "engine") -> dict:
        """Keep one line (already without its newline); returns the record as kept in the ring buffer."""
        line = self._masker.text(line)
        record = {"time": time.time(), "run_id": self._run_id, "source": source, "line": line}
        if self._handler is not None:
            self._handler.emit(logging.makeLogRecord({"msg": line, "args": None}))
        if self.console is not None:
            # Compose's `name | line` form: journald stores it as the daemon's line, parse-log strips both.
            self.console.write(f"{source}-{self._run_id or 0:05d} | {line}\n")
            self.console.flush()
        self.ring.append(record)
        self.live.publish(record)
        return record

    def tail(self, count: int) -> list[dict]:
        if count <= 0:
            return []
        return list(self.ring)[-count:]

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
            self._handler = None
