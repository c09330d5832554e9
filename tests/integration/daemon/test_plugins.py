"""Plugin versions on the real engine: two real builds of this project swapped under load, a broken build rolled
back, and the active version resumed by a restarted daemon."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import caovan_kernels
import caovan_manager.cli.plugins  # noqa: F401  (registers `caovan plugins`)
from caovan_manager.cli.app import app
from tests.caovan_manager.plugins.plugin_builds import build_wheel

from .conftest import INFERENCE_KEY, start_daemon, stop_daemon, wait_verdict
from .load import StreamingLoad

pytestmark = pytest.mark.engine

GOOD = f"{caovan_kernels.__version__}.post1"
BROKEN = f"{caovan_kernels.__version__}.post9"


@pytest.fixture(scope="module")
def installed(daemon) -> Iterator[dict[str, str]]:
    """Two builds in the shared daemon's store; afterwards the daemon goes back to its bundled plugin, as found:
    the session's other modules (main flow, faults, ...) share it and expect the bundled version running."""
    runner = CliRunner()
    config = str(daemon.state_dir / "caovan.toml")
    with tempfile.TemporaryDirectory(prefix="caovan-plugin-builds-") as workdir:
        for version, broken in ((GOOD, False), (BROKEN, True)):
            wheel = build_wheel(Path(workdir), version, broken)
            result = runner.invoke(app, ["plugins", "add", str(wheel), "--config", config])
            assert result.exit_code == 0, result.output
            assert f"added plugin version {version}" in result.output
    listing = runner.invoke(app, ["plugins", "list", "--config", config])
    assert GOOD in listing.output and BROKEN in listing.output and "* bundled" in listing.output
    yield {"good": GOOD, "broken": BROKEN}
    # the module's last test may leave the engine starting (a restarted daemon); a swap needs it ready
    daemon.wait_state("ready", 480)
    if daemon.status()["plugin"]["active_version"] is None:
        return
    started = time.time()
    response = httpx.post(f"{daemon.url}/plugins/bundled/activate", headers=daemon.admin())
    assert response.status_code == 202, response.text
    outcome = wait_activation(daemon, started)
    assert outcome["outcome"] == "activated", outcome
    plugin = daemon.status()["plugin"]
    assert plugin["active_version"] is None and plugin["running_version"] == plugin["bundled_version"], plugin


def wait_activation(daemon, started: float, timeout_s: float = 600) -> dict:
    return wait_verdict(daemon, "/plugins", "activation_in_progress", started, timeout_s)


def test_swap_to_another_real_build_under_load(daemon, installed):
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2) as load:
        load.wait_for_ok(2, 180)
        started = time.time()
        response = httpx.post(f"{daemon.url}/plugins/{GOOD}/activate", headers=daemon.admin())
        assert response.status_code == 202, response.text
        outcome = wait_activation(daemon, started)
        load.wait_for_ok(len(load.result.ok) + 2, 180)
    result = load.result
    print(result.summary(f"plugin swap to {GOOD}", faults=0))
    assert outcome["outcome"] == "activated", outcome["reason"]
    assert outcome["details"]["baseline"]["tokens_per_s"] > 0 and outcome["details"]["candidate"]["tokens_per_s"] > 0
    status = daemon.status()
    assert status["plugin"]["active_version"] == GOOD and status["plugin"]["running_version"] == GOOD
    assert not result.failed and result.unfinished == 0, [o.error for o in result.failed]


def test_broken_build_is_rolled_back_and_serving_continues(daemon, installed):
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2) as load:
        load.wait_for_ok(1, 180)
        started = time.time()
        assert httpx.post(f"{daemon.url}/plugins/{BROKEN}/activate", headers=daemon.admin()).status_code == 202
        outcome = wait_activation(daemon, started)
        load.wait_for_ok(len(load.result.ok) + 2, 300)
    result = load.result
    print(result.summary(f"broken plugin {BROKEN} rolled back", faults=1))
    assert outcome["outcome"] == "rolled_back", outcome
    assert "deliberately broken" in outcome["reason"], outcome["reason"]
    status = daemon.status()
    assert status["state"] == "ready" and status["plugin"]["running_version"] == GOOD
    assert status["plugin"]["active_version"] == GOOD
    assert not result.failed and result.unfinished == 0, [o.error for o in result.failed]


def test_a_restarted_daemon_resumes_the_active_version(daemon, installed, private_dir):
    assert daemon.status()["plugin"]["active_version"] == GOOD
    state = private_dir
    with sqlite3.connect(daemon.state_dir / "caovan.sqlite3") as source, \
            sqlite3.connect(state / "caovan.sqlite3") as copy:
        source.backup(copy)  # a consistent copy of the running daemon's database
    shutil.copytree(daemon.state_dir / "plugins", state / "plugins")
    second = start_daemon(state)
    try:
        status = second.status()
        assert status["plugin"]["active_version"] == GOOD and status["plugin"]["running_version"] == GOOD
    finally:
        leftovers = stop_daemon(second)
    assert not leftovers, leftovers
