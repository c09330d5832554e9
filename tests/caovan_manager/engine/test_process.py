"""The engine process group mechanics with real (small) processes: group stop, orphans, port holders."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from caovan_manager.engine.process import (
    EngineProcess,
    LaunchSpec,
    PortInUse,
    check_port_free,
    exiting,
    group_members,
)

# A parent that starts two children ignoring SIGTERM (like a stuck EngineCore), says so, then waits. One os.write per
# line: the three processes share the pipe and their lines must not interleave.
STUBBORN = r"""
import os, subprocess, sys, time
child = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.write(1, b'child up\\n'); time.sleep(300)"
for _ in range(2):
    subprocess.Popen([sys.executable, "-c", child])
os.write(1, b"parent up\n")
time.sleep(300)
"""


def spec(tmp_path: Path, code: str) -> LaunchSpec:
    return LaunchSpec(command=[sys.executable, "-c", code], env=dict(os.environ), cwd=tmp_path, socket_path=tmp_path / "engine.sock")


def run_with_cleanup(tmp_path: Path, scenario) -> None:
    """Run scenario(engine) on a fresh STUBBORN group; whatever happens, no process of the group survives."""
    async def main():
        engine = await EngineProcess.spawn(spec(tmp_path, STUBBORN))
        try:
            await asyncio.wait_for(scenario(engine), 30)
        finally:
            engine.signal_group(signal.SIGKILL)
    asyncio.run(main())


async def until_members(engine: EngineProcess, count: int) -> None:
    while len(engine.group_members()) < count:
        await asyncio.sleep(0.1)


def test_stop_kills_the_whole_group_including_children_that_ignore_sigterm(tmp_path):
    async def scenario(engine: EngineProcess):
        lines: list[str] = []
        pump = asyncio.create_task(engine.pump_output(lines.append))
        await until_members(engine, 3)
        while len(lines) < 3:
            await asyncio.sleep(0.1)
        assert os.getpgid(engine.pid) == engine.pid != os.getpgid(0)  # its own group
        started = time.monotonic()
        leftovers = await engine.stop(grace_s=1.0)
        assert leftovers == [] and engine.group_members() == []
        assert time.monotonic() - started < 8
        await asyncio.wait_for(pump, 5)
        assert sorted(lines) == ["child up", "child up", "parent up"]
    run_with_cleanup(tmp_path, scenario)


def test_children_left_by_a_killed_parent_are_found_and_killed(tmp_path):
    async def scenario(engine: EngineProcess):
        pump = asyncio.create_task(engine.pump_output(lambda line: None))
        await until_members(engine, 3)
        os.kill(engine.pid, signal.SIGKILL)  # like kill -9 of vLLM's API server
        assert await asyncio.wait_for(engine.wait(), 5) == -9
        orphans = engine.group_members()
        assert len(orphans) == 2  # the "EngineCore" processes outlive it
        assert await engine.stop(grace_s=0.5) == []
        assert engine.group_members() == []
        await asyncio.wait_for(pump, 5)  # the pipe closes once the last holder is gone
    run_with_cleanup(tmp_path, scenario)


def test_port_in_use_names_the_holder():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PortInUse) as err:
            check_port_free(port, "127.0.0.1", "the daemon's port", "choose another with --port")
    message = str(err.value)
    assert f"127.0.0.1:{port} is already in use by pid {os.getpid()}" in message
    assert "choose another with --port" in message
    check_port_free(port, "127.0.0.1", "the daemon's port", "choose another with --port")  # free once closed


def test_connections_left_in_time_wait_do_not_make_a_port_busy():
    # What a daemon killed with -9 leaves: its side of each client connection in TIME_WAIT, no listener.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server closes first: its end goes to TIME_WAIT
    listener.close()
    client.recv(1)
    client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the old check's bind: refused while TIME_WAIT lasts
    check_port_free(port, "127.0.0.1", "the daemon's port", "choose another with --port")


def test_an_engine_left_by_a_dead_daemon_is_killed_at_the_next_start(tmp_path):
    from caovan_manager.config import load_settings
    from caovan_manager.daemon import Daemon

    # A stand-in engine group (its command line names the engine module) and a run the "dead daemon" never ended.
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "caovan_kernels.serve"],
                            start_new_session=True)
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        daemon = Daemon(load_settings(state_dir=str(tmp_path)), autostart=False)
        daemon.store.record_run(1, None)
        daemon.store.record_run_pid(1, left.pid)
        daemon.store.record_run(2, None)
        daemon.store.record_run_pid(2, unrelated.pid)  # a recycled pid: not an engine, left alone
        daemon.reap_orphans()
        assert group_members(left.pid) == []  # (psutil reaped it: the test is its parent, the daemon would not be)
        assert unrelated.poll() is None
        assert daemon.store.unfinished_runs() == []
        assert "killed at the next daemon start" in daemon.store.runs()[1]["reason"]
    finally:
        for proc in (left, unrelated):
            proc.kill()
            proc.wait()


def test_a_process_the_kernel_is_ending_is_told_apart_from_a_live_one():
    """A zombie (exited, not yet reaped) carries the kernel's PF_EXITING flag, as a killed worker does while its
    memory is torn down; stop() waits longer for those instead of calling them survivors."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not exiting(psutil.Process(child.pid))
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # not reaped: we do not wait() yet
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert exiting(psutil.Process(child.pid))
    finally:
        child.kill()
        child.wait()
