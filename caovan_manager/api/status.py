"""GET /status, /healthz, /readyz: what the engine is doing, for people, dashboards and orchestrators."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from caovan_kernels import contract
from caovan_manager.proxy.gate import Gate
from caovan_manager.supervisor.run import Run
from caovan_manager.supervisor.state import State

from .draft_vocab import draft_vocab_document
from .schemas import Health, Readiness, StatusDocument

if TYPE_CHECKING:  # the composition root sits above the routers; they read it from app.state
    from caovan_manager.daemon import Daemon
    from caovan_manager.models.slot import ModelSlot

router = APIRouter(tags=["status"])


def status_document(daemon: Daemon) -> dict[str, Any]:
    """The primary model in full (the one engine without a models table, the table's first entry with one), then every
    model in brief under `models`."""
    primary = daemon.primary
    m = primary.machine
    now = time.monotonic()
    run = m.run
    act = m.activation
    return {
        **engine_state(primary, now),
        "daemon": {"pid": os.getpid(), "uptime_s": round(time.time() - daemon.started_at, 1)},
        "engine": None if run is None else engine_document(primary, now),
        "model": primary.entry.target.model,
        "embedded_default": primary.entry.target.embedded,
        "command": primary.effective_command(),
        "launch": launch_document(run, primary.launch_command()),
        "plugin": {
            "active_version": m.active_version,
            "bundled_version": daemon.bundled_version,
            "running_version": run.banner_version if run else None,
        },
        "markers": run.marker_values() if run else {},
        "marker_list": marker_list(run),
        "tensorcore75": tensorcore75_document(run),
        "latest": {kind: event.to_json() for kind, event in m.latest.items()},
        "restarts": m.restarts,
        "recent_restarts": [{key: row[key] for key in ("at", "cause", "reason")} for row in daemon.store.restarts(5)],
        "consecutive_failures": m.failures,
        "last_error": m.last_error,
        "hang_detector": m.hang.view(now),
        "activation": None if act is None else {
            "kind": act.kind, "from_version": act.from_version, "to_version": act.to_version,
            "from_draft_vocab": act.from_draft, "to_draft_vocab": act.to_draft, "phase": act.phase,
            "baseline": act.baseline.as_dict() if act.baseline else None},
        "draft_vocab": draft_vocab_document(daemon),
        "canary": canary_document(primary),
        "proxy": proxy_document(primary.gate),
        "models": model_documents(daemon),
    }


def engine_document(slot: ModelSlot, now: float) -> dict[str, Any]:
    """The primary's current run in full (the /events stream sends this dict as it is: its key order is kept)."""
    m, run = slot.machine, slot.machine.run
    facts = run_facts(slot)
    return {
        "run_id": facts["run_id"],
        "alive": m.state not in (State.STOPPED, State.BACKOFF, State.FAILED),
        "pid": facts["pid"],
        "address": facts["address"],
        "uptime_s": round(now - run.started_at, 1),
        "ready_s": facts["ready_s"],
        "vllm_version": run.engine_version,
        "mtp_tokens": run.mtp_tokens,
    }


def engine_state(slot: ModelSlot, now: float) -> dict[str, Any]:
    m = slot.machine
    return {"state": m.state.value, "reason": m.reason, "state_seconds": round(now - m.state_since, 1)}


def run_facts(slot: ModelSlot) -> dict[str, Any]:
    """The current run's id, process, address and start-up time (all None without a run)."""
    run = slot.machine.run
    return {
        "run_id": run.run_id if run else None,
        "pid": run.pid if run else None,
        "address": slot.effects.engine_address(run.run_id) if run else None,
        "ready_s": None if not run or run.ready_at is None else round(run.ready_at - run.started_at, 1),
    }


def proxy_document(gate: Gate) -> dict[str, Any]:
    return {"in_flight": gate.in_flight, "queued": gate.waiting, "gate": gate.mode}


def model_documents(daemon: Daemon) -> list[dict[str, Any]]:
    """Every configured model (the one engine's, without a models table)."""
    now = time.monotonic()
    rows = []
    for name, slot in daemon.slots.items():
        entry = slot.entry
        placed = daemon.placement.placement.slots[name]
        rows.append({
            "name": name, "aliases": list(entry.aliases), "gpus": None if entry.gpus is None else sorted(entry.gpus),
            "model": entry.target.model, **engine_state(slot, now), **run_facts(slot),
            "ttl_s": entry.ttl_s, "preload": entry.preload,
            "last_used": None if placed.last_request is None else round(time.time() - (now - placed.last_request), 1),
            "swaps": placed.swaps_in,
            "proxy": proxy_document(slot.gate),
            "canary": canary_document(slot),
        })
    return rows


def canary_document(slot: ModelSlot) -> dict[str, Any]:
    m = slot.machine
    return {
        "enabled": m.canary.enabled, "action": m.canary.action, "interval_s": m.canary.interval_s,
        "running": m.canary_running, "runs": m.canaries,
        "last": None if m.last_canary is None else m.last_canary.as_dict(),
        "degraded": None if m.degraded is None else m.degraded.as_dict(),
        "fallback_args": list(m.canary.fallback_args) if m.fallback else None,
    }


def launch_document(run: Run | None, daemon_command: list[str]) -> dict[str, Any]:
    """How the engine was started: the daemon's command, and what `caovan-vllm-serve` decided from it."""
    launch = run.launch if run else None
    return {
        "daemon_command": daemon_command,
        "profile_applied": None if launch is None else launch.profile,
        "decisions": [] if launch is None else list(launch.decisions),
    }


def marker_list(run: Run | None) -> list[dict[str, Any]]:
    """The plugin's markers in the contract's order, named and worded for the dashboard."""
    rows = []
    for marker in contract.RUN_MARKERS:
        seen = run is not None and marker.kind in run.markers
        rows.append({"kind": marker.kind, "label": marker.label, "seen": seen,
                     "text": marker.shown(run.markers[marker.kind].values()) if seen else None})
    return rows


def tensorcore75_document(run: Run | None) -> dict[str, Any] | None:
    view = run.tensorcore75 if run else None
    if view is None or (view.status is None and view.kernels is None):
        return None
    status, kernels = view.status, view.kernels
    return {
        "state": None if status is None else ("active" if status.active else "off"),
        "triton": None if status is None else status.triton,
        "mode": None if status is None else status.mode,
        "detail": None if status is None else status.detail,
        "kernels": None if kernels is None else asdict(kernels),
    }


@router.get("/status", summary="Engine state, run, plugin, markers, latest samples, restarts",
            response_model=StatusDocument)
async def get_status(request: Request) -> dict[str, Any]:
    return status_document(request.app.state.daemon)


@router.get("/healthz", summary="The daemon is alive (whatever the engine does)", response_model=Health)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="200 when the engine serves requests, else 503 with the state",
            response_model=Readiness, responses={503: {"model": Readiness, "description": "the engine is not ready"}})
async def readyz(request: Request) -> JSONResponse:
    m = request.app.state.daemon.primary.machine
    ready = m.state is State.READY
    return JSONResponse({"ready": ready, "state": m.state.value, "reason": m.reason}, status_code=200 if ready else 503)
