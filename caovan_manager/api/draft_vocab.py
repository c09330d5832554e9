"""GET /draft-vocab, POST /draft-vocab: DraftVocab on the primary model's engine, switched on only when verified.

A switch is the plugin activation's A/B (caovan_manager.supervisor.activation): measure, restart with the setting,
check the engine's DraftVocab line and its canary, measure again; kept only if tokens/s rose and acceptance held."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from caovan_kernels import contract
from caovan_kernels.draft_vocab.hot_set import DraftVocabSpec
from caovan_kernels.errors import DraftVocabError
from caovan_manager.supervisor.messages import DraftVocabCommand

from .control import decide
from .schemas import ADMIN_CALL, ControlResult, DraftVocabState, Problem, Strict
from .security import require_admin

router = APIRouter(tags=["draft vocabulary"])


class DraftVocabRequest(Strict):
    # Any JSON value: DraftVocabSpec.parse judges it and says what to give (a 400), not a generic validation error.
    setting: Any = Field(
        ..., description='caovan_draft_vocab: a number of ids (tokenizer order), a hot-vocabulary file, {"size": N, '
                         '"file": PATH}; null turns DraftVocab off.')


def draft_vocab_document(daemon: Any) -> dict[str, Any]:
    m = daemon.primary.machine
    line = m.run.markers.get(contract.DRAFT_VOCAB_MARKER.kind) if m.run else None
    act = m.activation
    return {
        "setting": m.draft_vocab,
        "engine": None if line is None else line.values(),
        "switch_in_progress": act is not None and act.kind == "draft_vocab",
        "learnt": asdict(daemon.primary.tally.view()),
    }


@router.get("/draft-vocab", summary="DraftVocab's kept setting, what the engine reports, switch history",
            response_model=DraftVocabState)
async def get_draft_vocab(request: Request) -> dict[str, Any]:
    daemon = request.app.state.daemon
    history = [row for row in daemon.store.activations(50) if row["details"].get("kind") == "draft_vocab"]
    return {**draft_vocab_document(daemon), "history": history[:10]}


@router.post("/draft-vocab", dependencies=[Depends(require_admin)],
             summary="Switch DraftVocab: measure, restart with it, verify; kept only if decoding got faster",
             status_code=202, response_model=ControlResult,
             responses={400: {"model": Problem, "description": "not a caovan_draft_vocab value"},
                        409: {"model": ControlResult, "description": "engine not ready, or busy"}, **ADMIN_CALL})
async def switch_draft_vocab(request: Request, body: DraftVocabRequest) -> JSONResponse:
    try:
        DraftVocabSpec.parse(body.setting, "the setting")
    except DraftVocabError as exc:
        raise HTTPException(400, detail=str(exc)) from None
    return await decide(request, DraftVocabCommand(body.setting))
