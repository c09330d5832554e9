"""GET /plugins, POST /plugins/{version}/activate: installed versions and verified swaps between them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse

from caovan_manager.errors import PluginStoreError, UnknownVersion
from caovan_manager.supervisor.messages import ActivateCommand

from .control import decide
from .schemas import ADMIN_CALL, ControlResult, Problem
from .security import require_admin

router = APIRouter(tags=["plugins"])

BUNDLED = "bundled"


@router.get("/plugins", summary="Installed plugin versions, the active one, activation history")
async def list_plugins(request: Request) -> dict[str, Any]:
    daemon = request.app.state.daemon
    m = daemon.primary.machine
    active = m.active_version
    versions = [{**meta, "active": meta["version"] == active} for meta in daemon.plugins.versions()]
    return {
        "active_version": active,
        "bundled": {"name": BUNDLED, "version": daemon.bundled_version, "active": active is None},
        "versions": versions,
        "store": str(daemon.plugins.root),
        "activation_in_progress": m.activation is not None,
        "history": daemon.store.activations(20),
    }


@router.post("/plugins/{version}/activate", dependencies=[Depends(require_admin)],
             summary="Drain, restart on this version, verify it; roll back automatically if it is worse",
             status_code=202, response_model=ControlResult,
             responses={400: {"model": Problem, "description": "not a valid version name"},
                        404: {"model": Problem, "description": "not installed"},
                        409: {"model": ControlResult, "description": "engine not ready, or busy"}, **ADMIN_CALL})
async def activate(request: Request, version: str = Path(..., max_length=64,
                                                        description="A store version, or `bundled`.")) -> JSONResponse:
    daemon = request.app.state.daemon
    target = None if version == BUNDLED else version
    if target is not None:
        try:
            daemon.plugins.site_dir(target)
        except UnknownVersion:  # fixed words: the store's own message names its folder and repeats the version
            raise HTTPException(404, detail="no plugin version of that name is installed; GET /plugins lists the "
                                            "installed ones, `caovan plugins add WHEEL` adds one") from None
        except PluginStoreError as exc:
            raise HTTPException(400, detail=str(exc)) from None
    return await decide(request, ActivateCommand(target))
