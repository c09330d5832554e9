"""GET /draft-vocab, POST /draft-vocab: DraftVocab on the primary model's engine, switched on only when verified.

A switch is the plugin activation's A/B (caovan_manager.supervisor.activation): measure, restart with the setting,
check the engine's DraftVocab line and its canary, measure again; kept only if tokens/s rose and acceptance held."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from caovan_kernels import contract
from caovan_kernels.draft_vocab.hot_set import DraftVocabSpec, read_ranked_ids, write_ranked_ids
from caovan_kernels.errors import DraftVocabError
from caovan_manager.errors import NothingLearnt
from caovan_manager.inbox import Outcome
from caovan_manager.models.slot import file_safe
from caovan_manager.supervisor.messages import DraftVocabCommand

from .control import decide, decision
from .schemas import ADMIN_CALL, ControlResult, DraftVocabState, Problem, Strict
from .security import require_admin

router = APIRouter(tags=["draft vocabulary"])

LEARNT = "learnt"  # the daemon's count of the primary model's relayed replies (caovan_manager.proxy.token_tally)
ANY_VOCABULARY = 1 << 31  # the daemon does not load the model's config: ids are checked for form here, range there


class DraftVocabRequest(Strict):
    # Any JSON value: DraftVocabSpec.parse judges it and says what to give (a 400), not a generic validation error.
    setting: Any = Field(
        ..., description='caovan_draft_vocab: a number of ids (tokenizer order), a hot-vocabulary file, {"size": N, '
                         '"file": PATH}, or "learnt" (the ids the daemon counted in this model\'s replies, as many as '
                         'cover draft_vocab.learn_coverage of them); null turns DraftVocab off.')


def draft_vocab_document(daemon: Any) -> dict[str, Any]:
    m = daemon.primary.machine
    line = m.run.markers.get(contract.DRAFT_VOCAB_MARKER.kind) if m.run else None
    act = m.activation
    last = daemon.store.draft_vocab_switches(1)
    return {
        "setting": m.draft_vocab,
        "engine": None if line is None else line.values(),
        "switch_in_progress": act is not None and act.kind == "draft_vocab",
        "last_switch": last[0] if last else None,
        "learnt": asdict(daemon.primary.tally.view()),
    }


@router.get("/draft-vocab", summary="DraftVocab's kept setting, what the engine reports, switch history",
            response_model=DraftVocabState)
async def get_draft_vocab(request: Request) -> dict[str, Any]:
    daemon = request.app.state.daemon
    return {**draft_vocab_document(daemon), "history": daemon.store.draft_vocab_switches(10)}


@router.post("/draft-vocab", dependencies=[Depends(require_admin)],
             summary="Switch DraftVocab: measure, restart with it, verify; kept only if decoding got faster",
             status_code=202, response_model=ControlResult,
             responses={400: {"model": Problem, "description": "not a caovan_draft_vocab value"},
                        409: {"model": ControlResult, "description": "engine not ready, or busy; or \"learnt\" "
                                                                     "before enough was counted"}, **ADMIN_CALL})
async def switch_draft_vocab(request: Request, body: DraftVocabRequest) -> JSONResponse:
    daemon = request.app.state.daemon
    setting = body.setting
    if setting == LEARNT:
        try:
            file, size = await daemon.primary.tally.learnt()
        except NothingLearnt as exc:
            return decision(daemon.primary.machine.state.value, Outcome(False, str(exc), conflict=True))
        setting = {"file": str(file), "size": size}
    try:
        spec = DraftVocabSpec.parse(setting, "the setting")
        if spec is not None and spec.file is not None:
            spec = replace(spec, file=await asyncio.to_thread(kept_copy, daemon.settings.state_dir,
                                                              daemon.primary.name, spec.file))
    except DraftVocabError as exc:
        raise HTTPException(400, detail=str(exc)) from None
    # One value per setting, so that "32768" and {"size": 32768} are the same switch, and "off" is off.
    return await decide(request, DraftVocabCommand(None if spec is None else spec.setting()))


def kept_copy(state_dir: Path, model: str, given: Path) -> Path:
    """The hot-vocabulary file a switch names, checked and copied where nothing rewrites it: the daemon's own learnt
    file changes as it counts, and an engine restarted later must read the ids that were measured. A relative path
    is the daemon's working folder's. Copies are named by their content, so the same ids make the same setting."""
    source = given.expanduser().resolve()
    ranked = read_ranked_ids(source, ANY_VOCABULARY, "named in the setting")  # the engine checks ids against its model
    body = json.dumps(ranked).encode()
    kept = state_dir / "draft-vocab" / "kept" / f"{file_safe(model)}-{hashlib.sha256(body).hexdigest()[:16]}.json"
    if not kept.is_file():
        write_ranked_ids(kept, ranked, {"model": model, "copied_from": str(source)})
    return kept
