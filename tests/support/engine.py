"""Start and stop a real vLLM CPU engine for tests, in its own process group, never leaving processes behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Engine:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric_sum(self, name: str) -> float:
        """Sum of a Prometheus series over all its label sets, read from the engine's /metrics."""
        text = httpx.get(f"{self.base_url}/metrics", timeout=10).text
        pattern = rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$"
        return sum(float(v) for v in re.findall(pattern, text, re.M))


def start_engine(model_dir: Path, args: list[str], env: dict[str, str], log_path: Path,
                 timeout_s: float = 420, plugin_site: Path | None = None) -> Engine:
    """plugin_site: a folder with another build of this project installed (`pip install --target`), imported
    instead of the checkout's, as the daemon runs a stored plugin version (its site first on PYTHONPATH, and a
    working directory where no caovan_kernels folder shadows it)."""
    port = free_port()
    command = [sys.executable, "-m", "caovan_kernels.serve", str(model_dir), "--host", "127.0.0.1",
               "--port", str(port), *args]
    log = log_path.open("wb")
    # The engine gets a user's environment: the test process's interpreter switch for kernel tests stays here
    # (caovan-vllm-serve sets it itself where GDNCore needs it).
    base_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cwd = None
    if plugin_site is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_site), env.get("PYTHONPATH")]))}
        cwd = log_path.parent
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**base_env, **env},
                               start_new_session=True, cwd=cwd)
    engine = Engine(process, port, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_engine(engine)
            raise RuntimeError(f"engine exited with {process.returncode} before ready; log tail:\n"
                               + engine.log_text()[-4000:])
        try:
            if httpx.get(f"{engine.base_url}/health", timeout=2).status_code == 200:
                return engine
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop_engine(engine)
    raise TimeoutError(f"engine not ready after {timeout_s} s; log tail:\n" + engine.log_text()[-4000:])


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_group(pgid: int, grace_s: float = 30) -> None:
    """SIGTERM a process group, SIGKILL what is left after grace_s: for an engine another command started (so no
    Popen to wait on), as the GPU scripts' engines that outlive the command that started them."""
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)


def stop_engine(engine: Engine, grace_s: float = 20) -> None:
    """SIGTERM the whole group, then SIGKILL what is left: vLLM's EngineCore outlives a killed API server."""
    pgid = engine.process.pid
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        engine.process.poll()
        time.sleep(0.2)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
    engine.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_alive(pgid):
        raise RuntimeError(f"processes of engine group {pgid} survived SIGKILL")
