"""A daemon of its own under mixed load, on the real CPU engine: the soak (engine restarts and plugin swaps under
streaming and unstreamed requests: none lost, no growth of memory, files, threads or the SQLite file), secrets
planted in the engine's arguments and output found nowhere, then the daemon killed with -9 under load and started
again at once on its port (its old engine cleaned up), its journald-bound output read back by parse-log.

The short version runs in CI (one restart, one swap). CAOVAN_SOAK_S=1800 runs the 30-minute one recorded in
docs/verification.md (an action every CAOVAN_SOAK_INTERVAL_S, cycling restart, swap, restart, swap back)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from itertools import cycle
from pathlib import Path

import httpx
import psutil
import pytest
from typer.testing import CliRunner

import caovan_kernels
import caovan_manager.cli.plugins  # noqa: F401  (registers `caovan plugins`)
from caovan_manager.cli.app import app
from tests.caovan_manager.plugins.plugin_builds import build_wheel

from .conftest import (
    ADMIN_KEY,
    INFERENCE_KEY,
    DaemonProcess,
    engine_group_members,
    start_daemon,
    stop_daemon,
)
from .load import EventLog, StreamingLoad

pytestmark = pytest.mark.engine

SOAK_S = float(os.environ.get("CAOVAN_SOAK_S", "0"))
INTERVAL_S = float(os.environ.get("CAOVAN_SOAK_INTERVAL_S", "240"))
SAMPLE_S = 10
ENGINE_KEY = "eng-soak-4e1d-7c"
OTHER = f"{caovan_kernels.__version__}.post2"
# The engine's own key, and its request log (each request's sampling parameters, our stop words among them: the
# planted keys, printed by the engine).
ENGINE_ARGS = ["--api-key", ENGINE_KEY, "--enable-log-requests"]
CONSOLE = "\n[logs]\nconsole = true\n"
SECRETS = (ADMIN_KEY, INFERENCE_KEY, ENGINE_KEY)


@pytest.fixture(scope="module")
def ops(demo_model_dir):
    """{"daemon": the current daemon}; the kill -9 test replaces it, the finalizer stops whichever is current."""
    state = Path(tempfile.mkdtemp(prefix="caovan-daemon-test-"))
    holder: dict[str, DaemonProcess] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="caovan-plugin-builds-") as workdir:
            wheel = build_wheel(Path(workdir), OTHER)
            holder["daemon"] = start_daemon(state, extra=ENGINE_ARGS, config_extra=CONSOLE)
            result = CliRunner().invoke(app, ["plugins", "add", str(wheel), "--config", str(state / "caovan.toml")])
            assert result.exit_code == 0, result.output
        yield holder
    finally:
        leftovers = stop_daemon(holder["daemon"]) if "daemon" in holder else []
        shutil.rmtree(state, ignore_errors=True)
        assert not leftovers, f"the daemon left engine processes behind: {leftovers}"


def resources(daemon: DaemonProcess) -> dict[str, float]:
    proc = psutil.Process(daemon.process.pid)
    db = sum(path.stat().st_size for path in daemon.state_dir.glob("caovan.sqlite3*"))
    logs = sum(path.stat().st_size for path in (daemon.state_dir / "logs").glob("*"))
    return {"rss_mb": proc.memory_info().rss / 2**20, "fds": proc.num_fds(), "threads": proc.num_threads(),
            "sqlite_kb": db / 1024, "logs_mb": logs / 2**20}


def act(daemon: DaemonProcess, action: str) -> None:
    before = daemon.status()["engine"]["run_id"]
    started = time.time()
    if action == "restart":
        response = httpx.post(f"{daemon.url}/restart", headers=daemon.admin(), json={"reason": "soak"}, timeout=30)
    else:
        version = OTHER if action == "swap" else "bundled"
        response = httpx.post(f"{daemon.url}/plugins/{version}/activate", headers=daemon.admin(), timeout=30)
    assert response.status_code == 202, response.text
    daemon.wait_state("ready", 600, run_after=before)
    if action != "restart":
        deadline = time.monotonic() + 600
        while True:
            body = httpx.get(f"{daemon.url}/plugins", timeout=10).json()
            done = [item for item in body["history"] if item["at"] >= started]
            if done and not body["activation_in_progress"]:
                assert done[0]["outcome"] == "activated", done[0]
                break
            assert time.monotonic() < deadline, "the activation did not finish"
            time.sleep(2)


@pytest.mark.timeout(max(SOAK_S, 0) + 1200)  # the long run lasts longer than the suite's per-test limit
def test_soak_loses_nothing_and_grows_nothing_and_leaks_no_secret(ops):
    daemon = ops["daemon"]
    events = EventLog(daemon.url)
    samples: list[dict[str, float]] = []
    done: list[str] = []
    actions = cycle(["restart", "swap", "restart", "swap back"])
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2, max_tokens=32, stop=[ADMIN_KEY, ENGINE_KEY],
                       mixed=True) as load:
        load.wait_for_ok(4, 240)
        started = time.monotonic()
        while True:
            done.append(next(actions))
            act(daemon, done[-1])
            load.wait_for_ok(len(load.result.ok) + 2, 240)
            samples.append(resources(daemon))
            if SOAK_S <= 0 and len(done) >= 2:
                break
            if SOAK_S > 0 and time.monotonic() - started >= SOAK_S:
                break
            next_action = time.monotonic() + INTERVAL_S
            while time.monotonic() < min(next_action, started + max(SOAK_S, 0) + 1):
                time.sleep(SAMPLE_S)
                samples.append(resources(daemon))
    events.close()
    result = load.result
    first, last = samples[0], samples[-1]  # the first sample follows the first action: the daemon is warm
    growth = {name: last[name] - first[name] for name in first}
    print(f"SUMMARY soak: {time.monotonic() - started:.0f} s, actions {done}, requests ok {len(result.ok)}, failed "
          f"{len(result.failed)}, hung {result.unfinished}; daemon RSS {first['rss_mb']:.1f} -> {last['rss_mb']:.1f} "
          f"MB, fds {first['fds']:.0f} -> {last['fds']:.0f}, threads {first['threads']:.0f} -> "
          f"{last['threads']:.0f}, SQLite {last['sqlite_kb']:.0f} KB, logs {last['logs_mb']:.1f} MB; peaks: RSS "
          f"{max(s['rss_mb'] for s in samples):.1f} MB, fds {max(s['fds'] for s in samples):.0f}, threads "
          f"{max(s['threads'] for s in samples):.0f}")
    assert not result.failed and result.unfinished == 0, [o.error for o in result.failed][:5]
    assert growth["rss_mb"] <= 20, growth
    assert growth["fds"] <= 8 and growth["threads"] <= 4, growth
    assert last["sqlite_kb"] <= 2048, last

    # The planted keys reached the engine's output (its request log shows the stop words, masked)...
    lines = httpx.get(f"{daemon.url}/logs", params={"tail": 5000}, timeout=30).json()["lines"]
    assert any("Received request" in r["line"] and "***" in r["line"] for r in lines), "no request log line"
    # ... and are nowhere in what the daemon shows, streams, stores or prints.
    outputs = {
        "/status": httpx.get(f"{daemon.url}/status", timeout=10).text,
        "/logs": json.dumps(lines),
        "/plugins": httpx.get(f"{daemon.url}/plugins", timeout=10).text,
        "/metrics": httpx.get(f"{daemon.url}/metrics", timeout=10).text,
        "/events": json.dumps(events.items),
        "sqlite": b"".join(p.read_bytes() for p in daemon.state_dir.glob("caovan.sqlite3*")).decode("latin-1"),
        "log files": b"".join(p.read_bytes() for p in (daemon.state_dir / "logs").glob("*")).decode("latin-1"),
        "daemon output": daemon.output.read_bytes().decode("latin-1"),
    }
    for where, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret[:4]}... found in {where}"
    assert ENGINE_KEY not in " ".join(json.loads(outputs["/status"])["command"])


def journald_view(output: Path) -> str:
    """The daemon's output as `journalctl -u caovan` shows it."""
    return "".join(f"Dec 01 10:00:00 gpu-box caovan[4242]: {line}\n"
                   for line in output.read_text(errors="replace").splitlines())


def parse_log(text: str) -> list[dict]:
    result = subprocess.run([sys.executable, "-c", "from caovan_manager.cli import main; main()", "parse-log", "-"],
                            input=text, capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_daemon_killed_with_kill_9_under_load_starts_again_at_once_on_its_port(ops):
    daemon = ops["daemon"]
    old_engine = daemon.status()["engine"]["pid"]
    with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=3) as load:
        load.wait_for_ok(3, 240)
        daemon.process.send_signal(signal.SIGKILL)  # the OOM killer, a crash: no shutdown at all
        daemon.process.wait(30)
        killed = time.time()
        started = time.monotonic()
        ops["daemon"] = again = start_daemon(daemon.state_dir, extra=ENGINE_ARGS, port=daemon.port,
                                             config_extra=CONSOLE, output_name="daemon-2.out", wait_ready=False)
        answering_after = time.monotonic() - started
        answering = time.time()
        again.engine_groups |= daemon.engine_groups
        status = again.wait_state("ready", 600)
        load.wait_for_ok(len(load.result.ok) + 3, 300)
    result = load.result
    lost = [o for o in result.failed if o.started >= answering]
    print(f"SUMMARY daemon kill -9: the new daemon answered on the same port {answering_after:.1f} s after the "
          f"start; requests ok {len(result.ok)}, failed {len(result.failed)} (in flight at the kill, or refused "
          f"while no daemon listened), failed once it answered {len(lost)}, hung {result.unfinished}")
    # It does not exit refusing the port (connections of the killed daemon in TIME_WAIT); the time is its start-up.
    assert again.process.poll() is None and answering_after < 45, answering_after
    assert "already in use" not in again.tail()
    assert not engine_group_members({old_engine}), "the engine the killed daemon left is still running"
    assert status["engine"]["pid"] != old_engine
    assert result.unfinished == 0
    # While no daemon listens, clients are refused at once (a connection error, nothing hangs); from the moment the
    # new one answers, requests wait in its queue for its engine: none fails.
    assert not lost, [o.error for o in lost][:5]
    assert all("Connection error" in o.error for o in result.failed if o.started > killed), \
        {o.error for o in result.failed}
    assert sum(o.started >= answering for o in result.ok) >= 3

    # What journald keeps of the new daemon (its own lines and, with logs.console, the engine's) reads back.
    kinds = {event["kind"] for event in parse_log(journald_view(again.output))}
    assert {"launch_decisions", "plugin_banner", "engine_config", "engine_ready"} <= kinds, kinds
