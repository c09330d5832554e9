"""Running the doctor as a subprocess, as the daemon does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def run_doctor_process(*args: str, cwd: Path | None = None, env: dict | None = None,
                       command: list[str] | None = None) -> tuple[int, dict, str]:
    """(exit code, the JSON report parsed from the whole of stdout, stderr)."""
    cmd = (command or [sys.executable, "-m", "caovan_kernels.doctor"]) + ["--json", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}
