"""DraftVocab's learnt hot vocabulary: the replies' text read back, counted with the model's own tokenizer, written
ranked (counts beside), resumed by the next daemon; the relay hands over what it streamed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer

from caovan_kernels.draft_vocab.hot_set import read_ranked_ids
from caovan_manager.config import DraftVocabSettings
from caovan_manager.errors import NothingLearnt
from caovan_manager.proxy.token_tally import TokenTally, coverage_size, reply_text
from tests.support.served import served_daemon

from .test_relay import CHAT, PacedEngine


def sse(*deltas: dict) -> bytes:
    return b"".join(f"data: {json.dumps({'choices': [d]})}\n\n".encode() for d in deltas) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(("body", "text"), [
    (json.dumps({"choices": [{"message": {"role": "assistant", "content": "Paris."}}]}).encode(), "Paris."),
    (json.dumps({"choices": [{"text": " is"}, {"text": " two"}]}).encode(), " is two"),
    (sse({"delta": {"role": "assistant"}}, {"delta": {"reasoning_content": "hm"}}, {"delta": {"content": "ok"}}),
     "hmok"),
    (sse({"text": "a"}, {"text": "b"}), "ab"),
    (sse({"delta": {"content": "say \"hi\"\n\u4e2d"}}), 'say "hi"\n\u4e2d'),
    (json.dumps({"choices": [{"message": {"content": "x"}, "logprobs": {"content": [{"token": "x"}]}}]}).encode(),
     "x"),
    (b"data: not json\n\ndata: [DONE]\n\n", ""),
    (b"\xff\xfe", ""),
    (json.dumps({"error": {"message": "no"}}).encode(), ""),
], ids=["chat", "completions", "chat stream", "completion stream", "escapes", "logprobs", "garbage event",
        "not utf-8", "error"])
def test_the_generated_text_is_read_back_from_any_reply(body: bytes, text: str) -> None:
    assert reply_text(body) == text


def run_tally(tally: TokenTally, replies: list[list[bytes]]) -> None:
    async def go() -> None:
        tally.start()
        for chunks in replies:
            tally.offer(chunks)
        await tally.aclose()
    asyncio.run(go())


def test_replies_are_counted_ranked_written_and_resumed(demo_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = Tokenizer.from_file(str(demo_model_dir / "tokenizer.json"))
    file = tmp_path / "draft-vocab" / "demo.json"
    tally = TokenTally("demo", demo_model_dir, file, DraftVocabSettings())
    assert tally.counting and tally.wants("/v1/chat/completions") and not tally.wants("/v1/embeddings")
    texts = ["the cat sat on the mat", "the dog", "the the the"]
    run_tally(tally, [[sse({"delta": {"content": t[:4]}}, {"delta": {"content": t[4:]}})] for t in texts])
    ids = [token for text in texts for token in tokenizer.encode(text, add_special_tokens=False).ids]
    assert tally.view().counted_tokens == len(ids) and tally.view().replies == 3
    body = json.loads(file.read_text())
    assert body["counts"] == sorted(body["counts"], reverse=True)
    assert [ids.count(i) for i in body["ids"]] == body["counts"]
    assert sorted(body["ids"]) == sorted(set(ids)) and body["model"] == "demo"
    assert read_ranked_ids(file, tokenizer.get_vocab_size()) == body["ids"]  # a file the plugin reads

    again = TokenTally("demo", demo_model_dir, file, DraftVocabSettings())
    run_tally(again, [[sse({"delta": {"content": "the"}})]])
    more = len(tokenizer.encode("the", add_special_tokens=False).ids)
    assert again.view().counted_tokens == len(ids) + more and again.view().replies == 4


def test_a_full_queue_skips_replies_and_counting_can_be_off(demo_model_dir: Path, tmp_path: Path) -> None:
    tally = TokenTally("demo", demo_model_dir, tmp_path / "a.json", DraftVocabSettings(learn_queue_bytes=100))
    tally.offer([b"x" * 60])
    tally.offer([b"x" * 60])
    assert tally.view().dropped_replies == 1
    off = TokenTally("demo", demo_model_dir, tmp_path / "b.json", DraftVocabSettings(learn=False))
    assert not off.wants("/v1/chat/completions") and "draft_vocab.learn is off" in off.view().why_not
    hub = TokenTally("Qwen/Qwen3.6-27B", None, tmp_path / "c.json", DraftVocabSettings())
    assert not hub.counting and "local folder with a tokenizer.json" in hub.view().why_not


def test_the_relay_hands_over_what_it_streamed(demo_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = Tokenizer.from_file(str(demo_model_dir / "tokenizer.json"))
    with served_daemon(tmp_path, model=str(demo_model_dir)) as served:
        engine = PacedEngine()
        for event in engine.read_by_client:
            event.set()  # no pacing here: the stream as a whole
        served.call(served.daemon.primary.gate.open, engine.start(served, tmp_path / "paced.sock"))
        response = httpx.post(f"{served.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30)
        assert response.status_code == 200
        tally = served.daemon.primary.tally
        expected = len(tokenizer.encode("".join(f"piece {n}" for n in range(5)), add_special_tokens=False).ids)
        assert served.wait_for(lambda: tally.view().counted_tokens == expected), tally.view()
        state = httpx.get(f"{served.url}/draft-vocab").json()
        assert state["learnt"]["counting"] and state["learnt"]["replies"] == 1, state


@pytest.mark.parametrize(("counts", "coverage", "size"), [
    ([5, 3, 1, 1], 0.8, 2), ([5, 3, 1, 1], 1.0, 4), ([5, 3, 1, 1], 0.5, 1), ([1], 0.999, 1),
])
def test_the_learnt_size_is_the_fewest_ids_covering_the_share(counts: list[int], coverage: float, size: int) -> None:
    assert coverage_size(counts, coverage) == size


def test_the_learnt_hot_vocabulary_waits_for_enough_tokens(demo_model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        tally = TokenTally("demo", demo_model_dir, tmp_path / "demo.json",
                           DraftVocabSettings(learn_min_tokens=10, learn_batch_s=0, learn_coverage=0.5))
        tally.start()
        with pytest.raises(NothingLearnt, match="0 tokens of demo's replies counted so far"):
            await tally.learnt()
        tally.offer([sse({"delta": {"content": "the cat sat on the mat and the dog sat on the cat " * 3}})])
        for _ in range(200):
            if tally.view().counted_tokens:
                break
            await asyncio.sleep(0.05)
        assert tally.view().counted_tokens >= 10, tally.view()
        file, size = await tally.learnt()
        body = json.loads(file.read_text())
        assert 0 < size < len(body["ids"]) and sum(body["counts"][:size]) >= 0.5 * sum(body["counts"])
        assert sum(body["counts"][:size - 1]) < 0.5 * sum(body["counts"])
        await tally.aclose()
    asyncio.run(go())
    off = TokenTally("demo", None, tmp_path / "x.json", DraftVocabSettings())
    with pytest.raises(NothingLearnt, match="local folder"):
        asyncio.run(off.learnt())
