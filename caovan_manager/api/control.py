"""POST /start, /stop, /restart: admin calls on the primary model, answered with the supervisor's (or, for a start or
stop among several models, placement's) decision."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from caovan_manager.models.placement import Load, Unload
from caovan_manager.supervisor.messages import Command, Outcome, RestartCommand, StartCommand, State, StopCommand

from .schemas import ADMIN_CALL, ControlResult
from .security import require_admin

# What the supervisor answered: 202 accepted, 409 refused in the current state, 400 refused.
DECISION = {"status_code": 202, "response_model": ControlResult,
            "responses": {400: {"model": ControlResult}, 409: {"model": ControlResult}, **ADMIN_CALL}}

router = APIRouter(tags=["control"], dependencies=[Depends(require_admin)])


class ControlRequest(BaseModel):
    reason: str | None = Field(None, max_length=200, description="Why (recorded with the restart).")


async def decide(request: Request, command: Command) -> JSONResponse:
    daemon = request.app.state.daemon
    command = daemon.masker.deep(command)  # its reason is recorded and shown
    # With several models, what runs where is placement's decision: a start (or a restart of a stopped engine) may
    # have to stop a model that shares the primary's GPUs.
    starts = isinstance(command, StartCommand) or (
        isinstance(command, RestartCommand) and daemon.machine.state in (State.STOPPED, State.FAILED))
    if daemon.routed and (starts or isinstance(command, StopCommand)):
        message = (Load if starts else Unload)(daemon.catalog.primary.name, command.reason)
        outcome = await daemon.placement.command(message)
    else:
        outcome = await daemon.supervisor.command(command)
    return decision(daemon.machine.state.value, outcome)


def decision(state: str, outcome: Outcome) -> JSONResponse:
    """A decision as the API answers it: 202 accepted, 409 refused in the current state, 400 refused."""
    code = 202 if outcome.accepted else (409 if outcome.conflict else 400)
    return JSONResponse({"accepted": outcome.accepted, "message": outcome.message, "state": state}, status_code=code)


@router.post("/start", summary="Start the engine (also out of `failed`)", **DECISION)
async def start(request: Request, body: ControlRequest | None = None) -> JSONResponse:
    return await decide(request, StartCommand((body and body.reason) or "start requested"))


@router.post("/stop", summary="Drain in-flight requests, then stop the engine", **DECISION)
async def stop(request: Request, body: ControlRequest | None = None) -> JSONResponse:
    return await decide(request, StopCommand((body and body.reason) or "stop requested"))


@router.post("/restart", summary="Drain in-flight requests (up to the drain timeout), then restart the engine",
             **DECISION)
async def restart(request: Request, body: ControlRequest | None = None) -> JSONResponse:
    return await decide(request, RestartCommand((body and body.reason) or "restart requested"))
