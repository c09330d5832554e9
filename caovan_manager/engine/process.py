"""The engine as an operating-system process group: spawn it, read its output, end it completely.

vLLM's API server spawns an EngineCore process (renamed `VLLM::EngineCore`) and workers that outlive a killed API
server, so the engine runs in its own session (process group = the server's pid) and ending it means the whole group,
checked afterwards with psutil rather than assumed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from caovan_manager.errors import PortInUse

SIGKILL_WAIT_S = 30  # a process that has not begun to exit this long after SIGKILL survived it
# One the kernel is still tearing down (PF_EXITING: gigabytes mapped, a loaded host) is going: waited for this long.
EXIT_WAIT_S = 120
PF_EXITING = 0x4


@dataclass(frozen=True)
class LaunchSpec:
    command: list[str]
    env: dict[str, str]
    cwd: Path
    socket_path: Path  # the engine's only listener


def check_port_free(port: int, host: str, what: str, fix: str) -> None:
    """Raise PortInUse naming the process that listens on host:port, if one does.

    With SO_REUSEADDR, as uvicorn and vLLM bind: connections of a process that just died (kill -9, a crash) linger in
    TIME_WAIT for a minute and do not stop a new listener, so they must not stop this check either."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror:
        return  # a name that does not resolve: the server's own bind reports it
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            return
        except OSError:
            pass
    raise PortInUse(host, port, port_holder(port), what, fix)


def port_holder(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return describe(psutil.Process(conn.pid))
    except (psutil.Error, OSError):
        pass
    return "another process (not visible to this user)"


def exiting(proc: psutil.Process) -> bool:
    """Whether the kernel is ending this process (PF_EXITING among the flags of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        flags = int(stat.rsplit(")", 1)[1].split()[6])  # after "pid (comm)": state ppid pgrp session tty tpgid flags
    except (OSError, ValueError, IndexError):
        return False
    return bool(flags & PF_EXITING)


def describe(proc: psutil.Process) -> str:
    try:
        cmdline = " ".join(proc.cmdline())[:160] or proc.name()
        return f"pid {proc.pid} ({cmdline}, status {proc.status()})"
    except psutil.Error:
        return f"pid {proc.pid}"


class EngineProcess:
    """One spawned engine: its group id, its output lines, its exit."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pgid = process.pid  # start_new_session: the server leads its own group

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def spawn(cls, spec: LaunchSpec) -> EngineProcess:
        spec.cwd.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            *spec.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=spec.env,
            cwd=spec.cwd,
            start_new_session=True,
            limit=1 << 20,  # long lines (a full engine config dump) must not break the reader
        )
        return cls(process)

    async def pump_output(self, on_line: Callable[[str], None]) -> None:
        """Deliver each output line until the pipe closes (which can be after the server's exit: the EngineCore
        holds it too)."""
        stream = self.process.stdout
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line longer than the limit: deliver what there is
                raw = await stream.read(1 << 20)
            if not raw:
                return
            on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))

    async def wait(self, poll_s: float = 0.1) -> int:
        """The exit code as soon as the server process has exited.

        Not asyncio's Process.wait(): that also waits for the output pipe to close, which the EngineCore keeps open
        after a killed API server; the return code itself is known at once."""
        while self.process.returncode is None:
            await asyncio.sleep(poll_s)
        return self.process.returncode

    def group_members(self) -> list[psutil.Process]:
        return group_members(self.pgid)

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    async def stop(self, grace_s: float, poll_s: float = 0.2) -> list[str]:
        """SIGTERM the group, wait up to grace_s for it to empty, SIGKILL what is left; returns what survived."""
        if self.group_members():
            self.signal_group(signal.SIGTERM)
            # A stopped (SIGSTOP) process only acts on SIGTERM once continued.
            self.signal_group(signal.SIGCONT)
            await _until(lambda: not self.group_members(), grace_s, poll_s)
        if self.group_members():
            self.signal_group(signal.SIGKILL)
            # A killed process with gigabytes mapped can take many seconds to go on a loaded host (seen: over 10 s
            # for a vLLM worker at a load average of 20, over 30 s for one beside another engine on 2 cores); one
            # that has not begun to exit by then survived, one that is exiting gets longer.
            await _until(lambda: not self.group_members(), SIGKILL_WAIT_S, poll_s)
            await _until(lambda: not any(exiting(proc) for proc in self.group_members()), EXIT_WAIT_S, poll_s)
        if self.process.returncode is None:
            try:
                await asyncio.wait_for(self.wait(), 5)
            except asyncio.TimeoutError:
                pass
        return [describe(proc) for proc in self.group_members()]


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


ENGINE_MARKERS = ("caovan_kernels.serve", "vllm.entrypoints", "VLLM::")


def kill_orphaned_engine(pgid: int) -> list[str]:
    """SIGKILL a process group left by an earlier daemon, if it still looks like an engine (a recycled pid that
    now leads something else is left alone); returns what was killed."""
    members = group_members(pgid)
    described = [describe(proc) for proc in members]
    if not any(marker in text for text in described for marker in ENGINE_MARKERS):
        return []
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return []
    psutil.wait_procs(members, timeout=10)
    return described


async def _until(done: Callable[[], bool], timeout_s: float, poll_s: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if done():
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(poll_s)
