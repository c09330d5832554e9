"""One owner's loop: a task takes messages one at a time and hands each to its handler; a command's sender waits for
the Outcome, a report's sender does not. The supervisor of each model and the placement owner each run one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

M = TypeVar("M")


@dataclass(frozen=True)
class Outcome:
    """An owner's answer to a command: accepted or not, and why in words for the API's answer."""

    accepted: bool
    message: str
    conflict: bool = False  # refused because of the current state (HTTP 409), not because of bad input
    # Accepted, for another owner to carry out: the caller passes this command on and answers with that owner's
    # Outcome (placement lets a loaded model's supervisor restart it, and report why it would not).
    then: object | None = None


class Inbox(Generic[M]):
    def __init__(self, name: str, handle: Callable[[M], Outcome | None], logger: logging.Logger) -> None:
        self.name = name
        self._handle = handle
        self._logger = logger
        self._queue: asyncio.Queue[tuple[M, asyncio.Future[Outcome] | None]] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    def post(self, message: M) -> None:
        self._queue.put_nowait((message, None))

    async def command(self, message: M) -> Outcome:
        reply: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((message, reply))
        return await reply

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            message, reply = await self._queue.get()
            try:
                outcome = self._handle(message)
            except Exception as exc:  # noqa: BLE001  (a bug in one decision must not stop the loop)
                self._logger.exception("%s failed to handle %s", self.name, type(message).__name__)
                outcome = Outcome(False, f"internal error while handling {type(message).__name__}: {exc}")
            if reply is not None and not reply.done():
                reply.set_result(outcome or Outcome(True, "done"))
