"""The daemon's memory across its own restarts (SQLite): runs, restarts and why, plugin activations, active version."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY, version TEXT, started_at REAL NOT NULL, ended_at REAL,
    returncode INTEGER, reason TEXT, pid INTEGER);
CREATE TABLE IF NOT EXISTS restarts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, run_id INTEGER, cause TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS activations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, from_version TEXT, to_version TEXT,
    outcome TEXT NOT NULL, reason TEXT NOT NULL, details TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT);
"""
# Rows kept per history table: the file stays bounded however long the daemon runs and however often it restarts.
RETAIN = 1000


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection, used from the event loop only; writes are small and immediate.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    # Runs -------------------------------------------------------------------------------------------------------------

    def next_run_id(self) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(run_id), 0) + 1 FROM runs").fetchone()
        return int(row[0])

    def record_run(self, run_id: int, version: str | None) -> None:
        self._db.execute("INSERT OR REPLACE INTO runs (run_id, version, started_at) VALUES (?, ?, ?)",
                         (run_id, version, time.time()))
        # Only ended runs go: an unfinished one may be an engine left by a dead daemon, still to be reaped.
        self._db.execute("DELETE FROM runs WHERE run_id <= ? AND ended_at IS NOT NULL", (run_id - RETAIN,))

    def record_run_end(self, run_id: int, returncode: int | None, reason: str) -> None:
        self._db.execute("UPDATE runs SET ended_at = ?, returncode = ?, reason = ? WHERE run_id = ?",
                         (time.time(), returncode, reason, run_id))

    def record_run_pid(self, run_id: int, pid: int) -> None:
        self._db.execute("UPDATE runs SET pid = ? WHERE run_id = ?", (pid, run_id))

    def unfinished_runs(self) -> list[dict[str, Any]]:
        """Runs whose end was never recorded: the daemon exited without stopping them."""
        return self._rows("SELECT * FROM runs WHERE ended_at IS NULL AND pid IS NOT NULL")

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM runs ORDER BY run_id DESC LIMIT ?", limit)

    # Restarts ---------------------------------------------------------------------------------------------------------

    def record_restart(self, run_id: int | None, cause: str, reason: str) -> None:
        self._db.execute("INSERT INTO restarts (at, run_id, cause, reason) VALUES (?, ?, ?, ?)",
                         (time.time(), run_id, cause, reason))
        self._trim("restarts")

    def restarts(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM restarts ORDER BY id DESC LIMIT ?", limit)

    # Plugin activations -----------------------------------------------------------------------------------------------

    def record_activation(self, from_version: str | None, to_version: str | None, outcome: str, reason: str,
                          details: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO activations (at, from_version, to_version, outcome, reason, details) VALUES (?,?,?,?,?,?)",
            (time.time(), from_version, to_version, outcome, reason, json.dumps(details)))
        self._trim("activations")

    def activations(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._rows("SELECT * FROM activations ORDER BY id DESC LIMIT ?", limit)
        for row in rows:
            row["details"] = json.loads(row["details"])
        return rows

    def active_version(self) -> str | None:
        row = self._db.execute("SELECT value FROM settings WHERE name = 'active_version'").fetchone()
        return row[0] if row else None

    def save_active_version(self, version: str | None) -> None:
        self._db.execute("INSERT OR REPLACE INTO settings (name, value) VALUES ('active_version', ?)", (version,))

    def draft_vocab(self, model: str) -> tuple[bool, Any]:
        """(True, the DraftVocab setting the daemon keeps for this model: a verified switch's, or None once turned
        off), or (False, None) when it never kept one. Per model: a hot vocabulary is one model's token ids."""
        row = self._db.execute("SELECT value FROM settings WHERE name = ?", (f"draft_vocab:{model}",)).fetchone()
        return (True, json.loads(row[0])) if row else (False, None)

    def save_draft_vocab(self, model: str, setting: Any) -> None:
        self._db.execute("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)",
                         (f"draft_vocab:{model}", json.dumps(setting)))

    def draft_vocab_switches(self, limit: int) -> list[dict[str, Any]]:
        """The latest DraftVocab switches, newest first (kept with the plugin activations)."""
        rows = self._rows("SELECT * FROM activations WHERE json_extract(details, '$.kind') = 'draft_vocab' "
                          "ORDER BY id DESC LIMIT ?", limit)
        for row in rows:
            row["details"] = json.loads(row["details"])
        return rows

    def _trim(self, table: str) -> None:
        self._db.execute(f"DELETE FROM {table} WHERE id <= (SELECT MAX(id) FROM {table}) - ?", (RETAIN,))

    def _rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return [dict(row) for row in self._db.execute(sql, params).fetchall()]
