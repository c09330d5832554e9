"""GET /models, POST /models/{name}/load and /unload: the configured models and the admin's hand on placement."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse

from caovan_manager.errors import UnknownModel
from caovan_manager.models.placement import Load, Unload
from caovan_manager.supervisor.messages import CanaryCommand

from .control import decision
from .schemas import ADMIN_CALL, CanaryAnswer, ControlResult, ModelList, Problem
from .security import require_admin
from .status import model_documents

router = APIRouter(tags=["models"])

# A path parameter: a model without a models table is named by its path or Hugging Face id, slashes and all.
NAME = Path(..., max_length=128, description="A configured model's name or alias.")
PLACEMENT = {"status_code": 202, "response_model": ControlResult,
             "responses": {404: {"model": Problem, "description": "no such model"}, **ADMIN_CALL}}


@router.get("/models", summary="Every configured model: GPUs, state, requests, idle ttl, swaps",
            response_model=ModelList)
async def list_models(request: Request) -> dict[str, Any]:
    daemon = request.app.state.daemon
    return {"routed": daemon.catalog.routed, "fairness_s": daemon.settings.swap.fairness_s, "models": model_documents(daemon)}


async def place(request: Request, name: str, message: type[Load] | type[Unload], reason: str) -> JSONResponse:
    daemon = request.app.state.daemon
    try:
        slot = daemon.slot(name)
    except UnknownModel as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    outcome = await daemon.placement.command(message(slot.name, reason))
    return decision(slot.machine.state.value, outcome)


@router.post("/models/{name:path}/load", dependencies=[Depends(require_admin)],
             summary="Load the model now, stopping models that share its GPUs (they drain first)", **PLACEMENT)
async def load(request: Request, name: str = NAME) -> JSONResponse:
    return await place(request, name, Load, f"load requested (POST /models/{name}/load)")


@router.post("/models/{name:path}/unload", dependencies=[Depends(require_admin)],
             summary="Drain the model's requests, then stop its engine; its next request loads it again",
             **PLACEMENT)
async def unload(request: Request, name: str = NAME) -> JSONResponse:
    return await place(request, name, Unload, f"unload requested (POST /models/{name}/unload)")



@router.post("/models/{name:path}/canary", dependencies=[Depends(require_admin)], response_model=CanaryAnswer,
             summary="Check the model's answers now (OutputLock's canary: decode against prefill) and return the "
                     "verdict; a failure also does what canary.action says",
             responses={404: {"model": Problem, "description": "no such model"},
                        409: {"model": ControlResult, "description": "the engine is not ready"},
                        504: {"model": Problem, "description": "no verdict in time"}, **ADMIN_CALL})
async def canary(request: Request, name: str = NAME) -> Any:
    daemon = request.app.state.daemon
    try:
        slot = daemon.slot(name)
    except UnknownModel as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    before = slot.machine.canaries
    outcome = await slot.supervisor.command(CanaryCommand())
    if not outcome.accepted:
        return decision(slot.machine.state.value, outcome)
    limit = daemon.settings.canary.timeout_s + 10  # the run's own bound, then its report's way back
    if not await slot.supervisor.wait_for(lambda m: m.canaries > before, limit):
        raise HTTPException(504, detail=f"the canary gave no verdict within {limit:g} s; GET /status shows it when it "
                                        f"comes")
    m = slot.machine
    return {"model": slot.name, "state": m.state.value, "degraded": m.degraded is not None,
            "verdict": m.last_canary.as_dict()}
