"""The log parser and `caovan parse-log` fuzzed: random text, real lines mangled, binary input, very long lines.
Nothing raises, and nothing blocks: every line is read in bounded time (a regular expression that backtracks
without bound on some input would show here as a line taking seconds)."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from caovan_manager.cli.parse_log import _decoded_lines
from caovan_manager.logwatch import parse_line, parse_lines
from caovan_manager.logwatch.parser import normalise_line

DATA = Path(__file__).parent / "data"
REAL_LINES = [json.loads(raw)["line"] for raw in (DATA / "public_vllm_lines.jsonl").read_text().splitlines()]
REAL_LINES += [line for log in sorted(DATA.glob("*.log")) for line in log.read_bytes().decode().split("\n")
               if line.strip()][:400]
PIECES = [*" :,.%()[]|=-_0123456789\x1b\\'\"{}\t\r", "Error", "INFO ", "pid=", "nan", "é", "\udcff", "tokens/s"]
LINE_TIME_LIMIT_S = 0.5  # for lines of up to a few kB; a parse takes microseconds


def timed(line: str) -> float:
    started = time.perf_counter()
    event = parse_line(line)
    elapsed = time.perf_counter() - started
    if event is not None:
        json.dumps(event.to_json(), allow_nan=False)  # what parse-log prints is strict JSON
    normalise_line(line)
    return elapsed


@settings(max_examples=400)
@given(st.text())
def test_random_text(text):
    assert timed(text) < LINE_TIME_LIMIT_S


@st.composite
def mangled(draw) -> str:
    line = draw(st.sampled_from(REAL_LINES))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(line)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "cut", "double"]))
        piece = "".join(draw(st.lists(st.sampled_from(PIECES), max_size=4)))
        if action == "insert":
            line = line[:at] + piece + line[at:]
        elif action == "delete":
            line = line[:at] + line[at + draw(st.integers(1, 20)):]
        elif action == "replace":
            line = line[:at] + piece + line[at + len(piece):]
        elif action == "cut":
            line = line[:at]
        else:
            line = line[:at] + line
    return line


@settings(max_examples=1500)
@given(mangled())
def test_real_lines_mangled(line):
    assert timed(line) < LINE_TIME_LIMIT_S


@settings(max_examples=300)
@given(st.binary(max_size=4096))
def test_binary_input_through_the_cli_reader(data):
    events = list(parse_lines(_decoded_lines(io.BytesIO(data))))
    assert all(line_no >= 1 for line_no, _ in events)


@settings(max_examples=15)
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=4), st.integers(200_000, 1_000_000))
def test_very_long_lines(parts, length):
    # Real lines glued without newlines up to a megabyte: a wrapping line that never ends, a binary blob in text.
    glued = " ".join(parts)
    line = (glued * (length // len(glued) + 1))[:length]
    assert timed(line) < 2.0, "a long line took seconds: the parser must stay linear"


def test_parse_log_reads_binary_garbage_to_its_end(tmp_path, random_seed):
    rng = random.Random(random_seed)
    blob = bytes(rng.randrange(256) for _ in range(200_000)) + b"\n" + REAL_LINES[0].encode() + b"\n"
    path = tmp_path / "garbage.log"
    path.write_bytes(blob)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", "from caovan_manager.cli import main; main()", "parse-log",
                             str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events and events[-1]["line_no"] == blob.count(b"\n"), events[-1:]
