"""POST /start, /stop, /restart: admin calls on the primary model, answered with its supervisor's decision; among
several models placement decides first (and lets the supervisor answer a restart in place)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from caovan_manager.inbox import Outcome
from caovan_manager.models.placement import Load, Restart, Unload
from caovan_manager.supervisor.messages import (
    Command,
    RestartCommand,
    StartCommand,
    StopCommand,
)

from .schemas import ADMIN_CALL, ControlResult
from .security import require_admin

# What the supervisor answered: 202 accepted, 409 refused in the current state, 400 refused.
DECISION = {"status_code": 202, "response_model": ControlResult,
            "responses": {400: {"model": ControlResult}, 409: {"model": ControlResult}, **ADMIN_CALL}}

# The placement message of each command placement decides on, among several models.
PLACED = {StartCommand: Load, StopCommand: Unload, RestartCommand: Restart}

router = APIRouter(tags=["control"], dependencies=[Depends(require_admin)])


class ControlRequest(BaseModel):
    reason: str | None = Field(None, max_length=200,
                               description="Why (recorded with the restart); printable text, no control characters.")

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        # The reason goes into the daemon's log: a newline, an escape sequence or a bidirectional override could
        # forge or disguise lines that `caovan parse-log` and the operator's terminal read.
        if value is not None and not value.isprintable():
            raise ValueError("the reason must be printable text: no newlines, control or formatting characters")
        return value


async def decide(request: Request, command: Command) -> JSONResponse:
    daemon = request.app.state.daemon
    command = daemon.masker.deep(command)  # its reason is recorded and shown
    if daemon.catalog.routed and type(command) in PLACED:
        # With several models, what runs where is placement's decision (in its own loop): a start, or a restart of an
        # engine that is not loaded, may have to stop a model that shares the primary's GPUs.
        message = PLACED[type(command)](daemon.catalog.primary.name, command.reason)
        outcome = await daemon.placement.command(message)
    else:
        outcome = await daemon.primary.supervisor.command(command)
    return decision(daemon.primary.machine.state.value, outcome)


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
