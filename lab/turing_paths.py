"""The three code paths GPU comparisons run side by side, one child process each (Triton's JIT caches and the
proxy are per process, and a kernel compiled on one path must never serve another):

- native: the GPU's own code (sm_90 on an H200), Triton's lowering;
- fma: the sm_75 code path through the Turing proxy with Triton's own lowering (what a 2080 Ti runs today);
- mma: the same with TensorCore75 (what a 2080 Ti runs with Caovan).

A script re-runs itself as `SCRIPT --path NAME ...`; `enter(NAME)` is the first thing the child does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from caovan_kernels import tensorcore75
from caovan_kernels.turing import proxy

PATHS = ("native", "fma", "mma")


def enter(path: str) -> str:
    """Put this process on `path` (before any Triton kernel compiles); returns a one-line description."""
    if path not in PATHS:
        raise ValueError(f"unknown code path {path!r}; one of {', '.join(PATHS)}")
    if path == "native":
        status = tensorcore75.process().activate("off")
        return f"native ({status.detail})"
    proxy.enable()
    status = tensorcore75.process().activate("auto" if path == "mma" else "off")
    if status.active != (path == "mma"):
        raise RuntimeError(f"TensorCore75 is not as the {path} path needs: {status.detail}")
    return f"{path} (Turing proxy; {status.line()})"


def chosen(text: str) -> list[str]:
    """The paths a script's `--paths` names ("native,fma,mma"; "" for none: use the results already there)."""
    named = [p for p in text.split(",") if p]
    unknown = sorted(set(named) - set(PATHS))
    if unknown:
        raise ValueError(f"unknown code path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    return named


def run_child(script: Path, path: str, args: list[str], out: Path, timeout_s: float) -> dict:
    """Run `script --path PATH ARGS --out OUT` and return the JSON it wrote to OUT (its stderr is passed through)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_OVERRIDE_ARCH")}
    done = subprocess.run([sys.executable, str(script), "--path", path, *args, "--out", str(out)], env=env,
                          timeout=timeout_s, stdout=sys.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} on the {path} path exited with {done.returncode}")
    return json.loads(out.read_text())


def run_paths(script: Path, paths: str, args: list[str], work: Path, timeout_s: float) -> dict[str, dict]:
    """Run `script` on each of `paths` ("native,mma"), one after another (each path's timings must have the GPU to
    themselves), keeping each result as WORK/PATH.json; returns every path's result found in `work`, earlier runs'
    included (a slow path can run in a sitting of its own). A bad path name is a ValueError."""
    work.mkdir(parents=True, exist_ok=True)
    for path in chosen(paths):
        run_child(script, path, args, work / f"{path}.json", timeout_s)
    return {path: json.loads((work / f"{path}.json").read_text()) for path in PATHS if (work / f"{path}.json").exists()}
