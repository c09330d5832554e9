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


def test_log_folder_keeps_the_last_runs_only(tmp_path):
    sink = LogSink(tmp_path, max_bytes=2000, backups=1, ring_lines=10, masker=Masker(), keep_runs=3)
    for run_id in range(1, 8):
        sink.open_run(run_id)
        sink.write("x" * 1500)
        sink.write("y" * 1500)  # rotates: engine-0000N.log.1 beside engine-0000N.log
    sink.close()
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["engine-00005.log", "engine-00005.log.1", "engine-00006.log", "engine-00006.log.1",
                     "engine-00007.log", "engine-00007.log.1"], names


def test_console_lines_are_what_journald_keeps_and_parse_log_reads(tmp_path):
    """With logs.console, each engine line goes to the daemon's stderr as `engine-<run> | <line>`; journalctl's
    default output puts its own prefix before it; `caovan parse-log` reads the events back from that."""
    import io
    import subprocess
    import sys

    data = Path(__file__).parent / "data" / "vllm_cpu_0.32_mtp3.log"
    lines = data.read_bytes().decode().split("\n")
    console = io.StringIO()
    sink = LogSink(tmp_path, 100_000, 1, 100, Masker(["sk-live-123"]), console=console)
    sink.open_run(3)
    for line in lines:
        sink.write(line.rstrip("\r"))
    sink.close()
    journal = "".join(f"Dec 01 09:00:{n % 60:02d} gpu-box caovan[4242]: {line}\n"
                      for n, line in enumerate(console.getvalue().splitlines()))
    assert journal.splitlines()[0].startswith("Dec 01 09:00:00 gpu-box caovan[4242]: engine-00003 | ")

    def kinds(text: str) -> list[str]:
        result = subprocess.run([sys.executable, "-c", "from caovan_manager.cli import main; main()", "parse-log", "-"],
                                input=text, capture_output=True, text=True, timeout=60, check=True)
        return [__import__("json").loads(line)["kind"] for line in result.stdout.splitlines()]

    direct = kinds("\n".join(lines))
    assert kinds(journal) == direct and {"throughput", "spec_decode", "engine_ready"} <= set(direct)
