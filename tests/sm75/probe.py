"""Run probe scenarios (tc75_probe.py, autotune_probe.py) in child processes compiling for sm_75 (pytest runs with
TRITON_INTERPRET set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_probe(scenario: str, cache_dir: Path, triton_path: Path | None = None, script: str = "tc75_probe.py") -> dict:
    """The scenario's JSON result; `triton_path` puts another Triton release ahead of the venv's own; `script`: the
    probe script in this folder."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (triton_path, ROOT) if p)
    done = subprocess.run([sys.executable, str(HERE / script), scenario], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0 and done.stdout.strip(), f"probe {scenario} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
