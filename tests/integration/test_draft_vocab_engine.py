"""DraftVocab on the real CPU engine: the drafter scores a hot vocabulary, the answers stay the target's.

The hot set here is deliberately poor (the tokenizer's first 256 ids: bytes and control tokens, while the demo's
replies are made of merged tokens), so that the drafts visibly change (acceptance falls) while every greedy token
stays what the stock engine (the session's shared one) answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caovan_kernels import contract
from caovan_manager.logwatch import parse_line
from tests.support.acceptance_lock import greedy_run
from tests.support.engine import Engine, start_engine, stop_engine
from tests.support.prompts import EVAL_PROMPTS

pytestmark = pytest.mark.engine

PROMPTS = EVAL_PROMPTS[:4]
MAX_TOKENS = 40
HOT = 256


@pytest.fixture(scope="module")
def hot_engine(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    args = contract.embedded_engine_args() + ["--additional-config", json.dumps({"caovan_draft_vocab": HOT})]
    running = start_engine(demo_model_dir, args, contract.embedded_engine_env(),
                           tmp_path_factory.mktemp("draft-vocab") / "engine.log")
    yield running
    stop_engine(running)


def test_greedy_answers_are_the_targets_whatever_the_drafter_scores(engine: Engine, hot_engine: Engine) -> None:
    stock = greedy_run(engine, contract.EMBEDDED_SERVED_MODEL_NAME, PROMPTS, MAX_TOKENS)
    hot = greedy_run(hot_engine, contract.EMBEDDED_SERVED_MODEL_NAME, PROMPTS, MAX_TOKENS)
    print(f"\nDraftVocab: draft acceptance {stock.acceptance:.1%} with the whole vocabulary, {hot.acceptance:.1%} with "
          f"{HOT} hot ids; {len(PROMPTS)} prompts x {MAX_TOKENS} greedy tokens")
    assert all(len(tokens) == MAX_TOKENS for tokens in stock.tokens)
    assert [[t for t, _ in p] for p in hot.tokens] == [[t for t, _ in p] for p in stock.tokens]
    # The drafts did change: merged tokens cannot be drafted from bytes alone.
    assert hot.acceptance < stock.acceptance - 0.3


def test_the_engine_says_what_the_drafter_scores(hot_engine: Engine, engine: Engine) -> None:
    events = [e for e in map(parse_line, hot_engine.log_text().splitlines())
              if e is not None and e.kind == contract.DRAFT_VOCAB_MARKER.kind]
    assert events and all(e.active and e.hot == HOT and e.vocab == 1024 for e in events), events
    assert "tokenizer order" in events[0].detail
    assert contract.DRAFT_VOCAB not in engine.log_text(), "the drafter changed without caovan_draft_vocab"


def test_a_hot_set_as_large_as_the_vocabulary_refuses_to_start(demo_model_dir: Path, tmp_path: Path) -> None:
    args = contract.embedded_engine_args() + ["--additional-config", json.dumps({"caovan_draft_vocab": 4096})]
    with pytest.raises(RuntimeError, match="before ready"):
        start_engine(demo_model_dir, args, contract.embedded_engine_env(), tmp_path / "engine.log")
    assert "caovan_draft_vocab asks for 4096 ids but the model's vocabulary has 1024" in (
        tmp_path / "engine.log").read_text()
