"""Background streaming load through the daemon with the official openai client; every request is accounted for."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import openai

PROMPTS = ["Hello!", "Count from one to ten.", "Name five animals.", "Tell me a joke.", "How are you today?"]


@dataclass
class Outcome:
    started: float
    ended: float
    ok: bool
    chunks: int
    error: str = ""


@dataclass
class LoadResult:
    outcomes: list[Outcome] = field(default_factory=list)
    unfinished: int = 0  # still running when the load was stopped and its grace ran out: hung

    @property
    def ok(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def unexplained(self) -> list[Outcome]:
        """Failures without the daemon's explanation (every error the proxy makes names the engine)."""
        return [o for o in self.failed if "engine" not in o.error]

    def summary(self, name: str, faults: int) -> str:
        """Lost = hung or failed without a clear error; in-flight requests that got a clear error are counted apart."""
        lost = len(self.unexplained) + self.unfinished
        return (f"SUMMARY {name}: load held {len(self.ok)}/{len(self.outcomes) + self.unfinished} requests ok, "
                f"faults survived {faults}, requests lost {lost} (clear errors {len(self.failed) - len(self.unexplained)}"
                f", hung {self.unfinished})")


class StreamingLoad:
    """`concurrency` workers, each sending streamed chat completions back to back until stop()."""

    def __init__(self, base_url: str, api_key: str, concurrency: int = 3, max_tokens: int = 24,
                 request_timeout_s: float = 600, stop: list[str] | None = None, mixed: bool = False,
                 model: str = "caovan-demo", pause_s: float = 0.0) -> None:
        self.base_url = base_url
        self.model = model
        self.pause_s = pause_s  # between one worker's requests: a light load that leaves the CPU to others
        self.api_key = api_key
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self.request_timeout_s = request_timeout_s
        self.stop_words = stop  # sent as the `stop` parameter (the engine logs it with each request)
        self.mixed = mixed  # every other request unstreamed, with varying lengths
        self.result = LoadResult()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._active: set[asyncio.Task] = set()

    def __enter__(self) -> StreamingLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, grace_s: float = 600) -> LoadResult:
        self._stop.set()
        self._thread.join(grace_s)
        return self.result

    def in_flight(self) -> int:
        return len(self._active)

    def served_after(self, moment: float) -> int:
        """Requests that started after `moment` (time.time()) and succeeded."""
        return sum(1 for o in self.result.ok if o.started > moment)

    def wait_for_ok(self, count: int, timeout_s: float, started_after: float = 0.0) -> None:
        """Until `count` requests succeeded (counting only those started after `started_after`, if given): requests
        queued through a restart succeed too, so "served after the fault" needs the start time."""
        deadline = time.monotonic() + timeout_s
        while self.served_after(started_after) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.served_after(started_after)} requests succeeded in {timeout_s} s; "
                                     f"errors: {[o.error for o in self.result.failed][:5]}")
            time.sleep(0.2)

    async def _main(self) -> None:
        client = openai.AsyncOpenAI(base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0,
                                    timeout=self.request_timeout_s)
        workers = [asyncio.create_task(self._worker(client, index)) for index in range(self.concurrency)]
        await asyncio.gather(*workers)
        await client.close()

    async def _worker(self, client: openai.AsyncOpenAI, index: int) -> None:
        count = 0
        while not self._stop.is_set():
            streamed = not self.mixed or count % 2 == 0
            max_tokens = self.max_tokens if not self.mixed else 8 + (index * 7 + count * 13) % (self.max_tokens * 2)
            task = asyncio.create_task(self._one(client, PROMPTS[(index + count) % len(PROMPTS)], streamed,
                                                 max_tokens))
            self._active.add(task)
            try:
                done, _ = await asyncio.wait({task}, timeout=self.request_timeout_s)
                if not done:
                    task.cancel()
                    self.result.unfinished += 1
            finally:
                self._active.discard(task)
            count += 1
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    async def _one(self, client: openai.AsyncOpenAI, prompt: str, streamed: bool = True,
                   max_tokens: int | None = None) -> None:
        started = time.time()
        chunks = 0
        try:
            request = dict(model=self.model, messages=[{"role": "user", "content": prompt}], temperature=0,
                           max_tokens=max_tokens or self.max_tokens, stop=self.stop_words)
            if streamed:
                async for chunk in await client.chat.completions.create(**request, stream=True):
                    if chunk.choices and chunk.choices[0].delta.content:
                        chunks += 1
            else:
                reply = await client.chat.completions.create(**request)
                chunks = 1 if reply.choices and reply.choices[0].message.content else 0
            ok = chunks > 0
            error = "" if ok else "stream ended without content"
        except openai.APIError as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"
        self.result.outcomes.append(Outcome(started, time.time(), ok, chunks, error))


class EventLog:
    """The daemon's /events stream collected in the background."""

    def __init__(self, url: str) -> None:
        self.items: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        time.sleep(0.5)

    def _read(self, url: str) -> None:
        try:
            with httpx.stream("GET", f"{url}/events", timeout=None) as stream:
                for line in stream.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("data: "):
                        self.items.append(json.loads(line[6:]))
        except httpx.TransportError:
            # A closed log waits for the next event to notice; a daemon killed by a later test ends it this way.
            if not self._stop.is_set():
                raise

    def states(self) -> list[dict]:
        return [item for item in self.items if item.get("type") == "state"]

    def close(self) -> None:
        self._stop.set()
