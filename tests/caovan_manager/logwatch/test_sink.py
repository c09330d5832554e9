"""The engine log sink: a file per run, rotated; a ring buffer; live subscribers; configured keys masked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker


def test_file_per_run_rotation_ring_and_masking(tmp_path):
    sink = LogSink(tmp_path / "logs", max_bytes=2000, backups=2, ring_lines=50, masker=Masker(["sk-live-123"]))
    first = sink.open_run(1)
    sink.write("engine one starting")
    second = sink.open_run(2)
    for index in range(200):
        sink.write(f"line {index:04d} with key sk-live-123 inside")
    sink.close()
    assert first.name == "engine-00001.log" and "engine one starting" in first.read_text()
    rotated = sorted(path.name for path in (tmp_path / "logs").glob("engine-00002.log*"))
    assert rotated == ["engine-00002.log", "engine-00002.log.1", "engine-00002.log.2"]
    assert "line 0199" in second.read_text()
    tail = sink.tail(3)
    assert [entry["line"][:9] for entry in tail] == ["line 0197", "line 0198", "line 0199"]
    assert all(entry["run_id"] == 2 for entry in tail)
    assert len(sink.tail(1000)) == 50 and sink.tail(0) == []
    text = "".join(path.read_text() for path in (tmp_path / "logs").iterdir())
    assert "sk-live-123" not in text and "with key *** inside" in text


def test_live_subscribers_get_new_lines():
    async def scenario():
        sink = LogSink(Path("/nonexistent"), 1000, 0, 10, Masker())  # no run opened: ring and subscribers only
        async with sink.live.subscribe() as queue:
            sink.write("hello")
            assert (await asyncio.wait_for(queue.get(), 1))["line"] == "hello"
        assert sink.live.subscribers == 0
    asyncio.run(scenario())
