"""DraftVocab's learnt hot vocabulary: the tokens of the replies the relay hands back, counted per model.

The relay only keeps references to the reply's chunks it sends anyway and hands them over when the exchange ends
(one append to a bounded queue; over the byte bound a reply is not counted, never delayed). A task of the daemon's
loop reads the queued replies' text and a worker thread tokenizes it with the model's own tokenizer; the ranked
ids, with their counts, go to a hot-vocabulary file (caovan_kernels.draft_vocab.hot_set) that
`POST /draft-vocab {"setting": {"file": ..., "size": N}}` can then switch to, verified.

Only counts of token ids are stored, never text. The count is of the text as the tokenizer reads it back, which
for a byte-level BPE is the ids the model produced but for rare spellings; a frequency ranking does not need more.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from caovan_kernels.draft_vocab import hot_set
from caovan_manager.config import DraftVocabSettings
from caovan_manager.errors import NothingLearnt

logger = logging.getLogger("caovan.draft_vocab")

# The relayed endpoints whose replies are generated text.
COUNTED_LABELS = frozenset({"/v1/chat/completions", "/v1/completions"})


@dataclass
class TallyView:
    """What /draft-vocab shows of a model's tally."""

    counting: bool
    why_not: str
    file: str
    counted_tokens: int
    replies: int
    dropped_replies: int


class TokenTally:
    def __init__(self, model: str, model_dir: Path | None, file: Path, settings: DraftVocabSettings) -> None:
        self.model = model
        self.file = file
        self.settings = settings
        self.counts: collections.Counter[int] = collections.Counter()  # written by the worker thread only
        self.counted = 0
        self.replies = 0
        self.dropped = 0
        self._since_write = 0
        self._queue: collections.deque[list[bytes]] = collections.deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()  # one count or write at a time: the worker thread owns the counts meanwhile
        self._task: asyncio.Task | None = None
        self._tokenizer, self.why_not = _tokenizer(model_dir) if settings.learn else (None, "draft_vocab.learn is off")
        if self._tokenizer is not None:
            self._resume()

    @property
    def counting(self) -> bool:
        return self._tokenizer is not None

    def wants(self, label: str) -> bool:
        """Whether the relay should hand this exchange's reply over (cheap: it runs per request)."""
        return self._tokenizer is not None and label in COUNTED_LABELS

    @property
    def reply_cap(self) -> int:
        """The most bytes of one reply the relay keeps for counting: one that could never be queued is let go."""
        return self.settings.learn_queue_bytes

    def skip(self) -> None:
        """A reply the relay let go uncounted (longer than reply_cap)."""
        self.dropped += 1

    def offer(self, chunks: list[bytes]) -> None:
        """A finished reply's chunks (as sent to the client); skipped when the queue holds too many bytes."""
        size = sum(len(chunk) for chunk in chunks)
        if self._queued_bytes + size > self.settings.learn_queue_bytes:
            self.skip()
            return
        self._queue.append(chunks)
        self._queued_bytes += size
        self._wake.set()

    def start(self) -> None:
        if self._tokenizer is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"token tally {self.model}")

    async def aclose(self) -> None:
        """Count what is queued, write the file, stop (the worker finishes its batch: no count runs twice)."""
        if self._task is None:
            return
        self._stop.set()
        self._wake.set()
        await self._task
        self._task = None

    async def learnt(self) -> tuple[Path, int]:
        """The hot-vocabulary file as counted up to now (written first) and how many of its ids, most frequent first,
        cover draft_vocab.learn_coverage of the counted tokens."""
        if not self.counting:
            raise NothingLearnt(f"nothing is learnt for {self.model}: {self.why_not}")
        if self.counted < self.settings.learn_min_tokens:
            raise NothingLearnt(f"{self.counted} tokens of {self.model}'s replies counted so far, "
                                f"draft_vocab.learn_min_tokens = {self.settings.learn_min_tokens} needed: serve more "
                                f"through the daemon and retry (GET /draft-vocab shows the count)")
        async with self._lock:
            await self._count_queued()
            await asyncio.to_thread(self._write)
            ranked = [count for _, count in self.counts.most_common()]
        return self.file, coverage_size(ranked, self.settings.learn_coverage)

    def view(self) -> TallyView:
        return TallyView(self.counting, self.why_not, str(self.file), self.counted, self.replies, self.dropped)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            # Replies counted in batches: one worker-thread call (and one tokenizer batch, which runs in parallel
            # outside the GIL) per draft_vocab.learn_batch_s, not one per reply.
            if not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), self.settings.learn_batch_s)
                except asyncio.TimeoutError:
                    pass
            self._wake.clear()
            stopping = self._stop.is_set()  # then this is the last batch: count what is queued and write
            try:
                async with self._lock:
                    await self._count_queued()
                    if self._since_write >= self.settings.learn_write_every_tokens or (stopping and self._since_write):
                        await asyncio.to_thread(self._write)
            except Exception as exc:  # noqa: BLE001 - counting stops, said in /draft-vocab; the relay goes on
                logger.warning("DraftVocab: counting the replies of %s stopped: %s", self.model, exc)
                self.why_not = f"counting stopped after an error: {exc}"
                self._tokenizer = None
                return
            if stopping:
                return

    async def _count_queued(self) -> None:
        batch = []
        while self._queue:
            chunks = self._queue.popleft()
            self._queued_bytes -= sum(len(chunk) for chunk in chunks)
            batch.append(chunks)
        if batch:
            await asyncio.to_thread(self._count, batch)

    def _count(self, replies: list[list[bytes]]) -> None:
        texts = [text for text in (reply_text(b"".join(chunks)) for chunks in replies) if text]
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False) if texts else []
        for encoding in encoded:
            self.counts.update(encoding.ids)
            self._since_write += len(encoding.ids)
            self.counted += len(encoding.ids)
        self.replies += len(replies)

    def _write(self) -> None:
        ranked = self.counts.most_common()
        try:
            hot_set.write_ranked_ids(self.file, [token for token, _ in ranked], {
                "model": self.model, "counted_tokens": self.counted, "replies": self.replies,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "counts": [count for _, count in ranked]})
            self._since_write = 0
        except OSError as exc:
            logger.warning("DraftVocab: cannot write the learnt hot vocabulary %s (%s); counting goes on", self.file,
                           exc)

    def _resume(self) -> None:
        """Counts of an earlier daemon on this state folder, so that learning outlives restarts."""
        try:
            body = json.loads(self.file.read_text())
            ids, counts = body.get("ids") or [], body.get("counts") or []
            ours = body.get("format") == hot_set.FILE_FORMAT and body.get("model") == self.model
            if ours and len(ids) == len(counts):
                self.counts.update(dict(zip(ids, counts)))
                self.counted = sum(self.counts.values())
                self.replies = int(body.get("replies", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # none yet, or not ours: start from nothing (the file is rewritten at the first write)


# The string fields that hold generated text in vLLM's chat and text completions, whole or streamed: found by one
# scan of the reply instead of a JSON parse per event (five times cheaper; the tally runs beside the relay). A
# chat's logprobs "content" is a list and an unset field null: neither matches.
_GENERATED = re.compile(rb'"(?:content|text|reasoning_content|reasoning)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def coverage_size(counts: list[int], coverage: float) -> int:
    """How many of the ids counted `counts` times (most frequent first) cover `coverage` of all their tokens."""
    need, covered = coverage * sum(counts), 0
    for size, count in enumerate(counts, start=1):
        covered += count
        if covered >= need:
            return size
    return len(counts)


def reply_text(body: bytes) -> str:
    """The generated text of a chat or text completion, streamed (server-sent events) or whole."""
    parts = []
    for match in _GENERATED.finditer(body):
        raw = match.group(1)
        try:
            parts.append(json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode())
        except ValueError:  # not UTF-8, or a broken escape: not text the model produced
            continue
    return "".join(parts)


def _tokenizer(model_dir: Path | None) -> tuple[Any, str]:
    """The model's tokenizer, or (None, why not)."""
    if model_dir is None or not (model_dir / "tokenizer.json").is_file():
        return None, ("the model is not a local folder with a tokenizer.json: serve it from a folder (a Hugging Face "
                      "id can be downloaded to one) to learn its hot vocabulary")
    try:
        return Tokenizer.from_file(str(model_dir / "tokenizer.json")), ""
    except Exception as exc:  # noqa: BLE001 - any unreadable tokenizer: counting is off, said in /draft-vocab
        return None, f"the model's tokenizer.json cannot be read ({exc})"
