"""One real daemon (embedded default: vLLM CPU engine + demo model) watched by one real Prometheus, shared by the
browser test and the Prometheus test of this folder.

The daemon serves the embedded default as users start it (one model, no models table): the Models card shows its
one row. Several models, their swaps and the card's rows for them are tested on their own daemon, in
tests/integration/daemon/test_models.py.

The daemon is started and stopped with the daemon integration tests' own helpers (a `caovan serve` subprocess;
stopping checks that no engine process is left). Prometheus starts right after the daemon is ready, from the
example configuration in web/prometheus/prometheus.yml with a 1 s scrape interval, so it sees all the traffic and
the restart the tests make. Both run in their own process groups and are killed afterwards, also on failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.daemon.conftest import DaemonProcess, start_daemon, stop_daemon
from tests.support.engine import free_port

from .browser import INSTALL_HINT

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "web"
PROMETHEUS = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL = "1s"
PRIMARY = "caovan-demo"  # the model's name in the Models card and the `model` label: its served name


@dataclass
class Prometheus:
    process: subprocess.Popen
    port: int
    started_at: float
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str | float) -> dict:
        """GET /api/v1/<path>; the `data` of a successful answer (a failed query raises with Prometheus's error)."""
        body = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30).json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@dataclass
class Observed:
    daemon: DaemonProcess
    prometheus: Prometheus


def scrape_config(example: Path, target: str) -> dict:
    """The committed example with the test daemon's address and a 1 s scrape interval."""
    config = yaml.safe_load(example.read_text())
    config["global"]["scrape_interval"] = SCRAPE_INTERVAL
    config["global"]["evaluation_interval"] = SCRAPE_INTERVAL
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [target]}]
    # The rule files sit beside the example; this copy is written elsewhere.
    config["rule_files"] = [str(example.parent / name) for name in config.get("rule_files", [])]
    return config


def start_prometheus(folder: Path, target: str) -> Prometheus:
    if not PROMETHEUS.exists():
        pytest.fail(f"{PROMETHEUS} is missing: {INSTALL_HINT}")
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(REPO / "web" / "prometheus" / "prometheus.yml", target)))
    port = free_port()
    log = folder / "prometheus.log"
    process = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    prometheus = Prometheus(process, port, time.time(), log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"Prometheus exited with {process.returncode}:\n{prometheus.tail()}")
        try:
            if httpx.get(f"{prometheus.url}/-/ready", timeout=2).status_code == 200:
                return prometheus
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop_prometheus(prometheus)
    raise AssertionError(f"Prometheus not ready within 60 s:\n{prometheus.tail()}")


def stop_prometheus(prometheus: Prometheus) -> None:
    if prometheus.process.poll() is not None:
        return
    os.killpg(prometheus.process.pid, signal.SIGTERM)
    try:
        prometheus.process.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(prometheus.process.pid, signal.SIGKILL)
        prometheus.process.wait(10)


@pytest.fixture(scope="session")
def observed(demo_model_dir: Path) -> Iterator[Observed]:
    """The ready daemon on the embedded default, and Prometheus scraping its /metrics and /metrics/engine."""
    folder = Path(tempfile.mkdtemp(prefix="caovan-web-test-"))
    daemon = start_daemon(folder / "daemon")
    prometheus = None
    try:
        prometheus = start_prometheus(folder / "prometheus", f"127.0.0.1:{daemon.port}")
        yield Observed(daemon, prometheus)
    finally:
        if prometheus is not None:
            stop_prometheus(prometheus)
        leftovers = stop_daemon(daemon)
        shutil.rmtree(folder, ignore_errors=True)
        assert not leftovers, f"the daemon left engine processes behind: {leftovers}"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Screenshots go to test-artifacts/web/ (git-ignored), kept after the run for people and CI to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
