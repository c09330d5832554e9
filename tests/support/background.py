"""Work whose result a few tests read and which needs no engine: compiling kernels for sm_75, training a demo
model. It starts at the lowest CPU priority once the session's tests are collected, so it takes the cores that
engine tests leave idle (their waits, sleeps and timeouts) instead of time of its own. The tests that read it run
last: by then it is done, or it has the machine to itself (its low priority costs nothing when nothing else runs).

A job is a plain subprocess: its output goes to files (nothing to drain), and tests see its exit status and the
end of its stderr when it fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Job:
    name: str
    args: tuple[str, ...]  # after `python`
    readers: tuple[str, ...]  # test files (from the repository root) that read its result
    compiles: bool = False  # compiles for sm_75: Triton's interpreter must be off


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    folder: Path  # the job's own folder: files it was told to write go here

    def check(self, what: str) -> Done:
        assert self.returncode == 0, f"{what} failed (exit {self.returncode}):\n{self.stderr[-4000:]}"
        return self


@dataclass
class _Running:
    process: subprocess.Popen
    folder: Path


@dataclass
class Jobs:
    """The session's jobs: start() the ones whose readers were collected, result() waits for one."""

    known: dict[str, Job]
    _running: dict[str, _Running] = field(default_factory=dict)
    _root: Path | None = None

    def readers(self) -> set[str]:
        return {reader for job in self.known.values() for reader in job.readers}

    def start(self, collected: set[str]) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="caovan-test-jobs-"))
        for job in self.known.values():
            if collected & set(job.readers):
                self._running[job.name] = self._spawn(job)

    def _spawn(self, job: Job) -> _Running:
        folder = self._root / job.name
        folder.mkdir()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if job.compiles:
            env.pop("TRITON_INTERPRET", None)
        args = [a.replace("{folder}", str(folder)) for a in job.args]
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            process = subprocess.Popen([sys.executable, *args], stdout=out, stderr=err, cwd=ROOT, env=env,
                                       start_new_session=True, preexec_fn=lambda: os.nice(19))
        return _Running(process, folder)

    def started(self, name: str) -> bool:
        return name in self._running

    def result(self, name: str, timeout_s: float = 1500) -> Done:
        running = self._running.get(name)
        assert running is not None, f"background job {name} was not started: is its reader listed in its Job?"
        try:
            returncode = running.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._end(running)
            raise AssertionError(f"background job {name} did not finish in {timeout_s:g} s of waiting") from None
        return Done(returncode, (running.folder / "stdout").read_text(errors="replace"),
                    (running.folder / "stderr").read_text(errors="replace"), running.folder)

    def stop(self) -> None:
        """The session ends: whatever still runs (its readers were deselected or failed early) is ended."""
        for running in self._running.values():
            self._end(running)

    @staticmethod
    def _end(running: _Running) -> None:
        if running.process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(running.process.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while running.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if running.process.poll() is not None:
                return
