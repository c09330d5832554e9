"""`caovan parse-log FILE`: one JSON object per recognised line, streaming, `-` for stdin, exit 2 on unreadable
input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import caovan_manager.cli.parse_log  # noqa: F401  (registers the command)
from caovan_manager.cli.app import app

CAPTURED = Path(__file__).parent / "data" / "vllm_cpu_0.32_mtp3.log"
runner = CliRunner()


def _objects(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


def test_captured_log():
    result = runner.invoke(app, ["parse-log", str(CAPTURED)])
    assert result.exit_code == 0, result.output
    objects = _objects(result.stdout)
    assert [(o["line_no"], o["kind"]) for o in objects] == [
        (27, "engine_config"), (139, "engine_ready"),
        (145, "throughput"), (146, "spec_decode"), (147, "throughput"), (148, "spec_decode"),
        (151, "throughput"), (152, "spec_decode"),
    ]
    assert objects[0] == {"line_no": 27, "kind": "engine_config", "version": "0.32.0", "mtp_tokens": 3,
                          "model": "<demo-model>"}
    assert objects[4] == {"line_no": 147, "kind": "throughput", "prompt_tps": 3.8, "generation_tps": 2.4,
                          "running": 1, "waiting": 0, "kv_cache_usage_pct": 0.2, "prefix_cache_hit_pct": None,
                          "engine_index": 0}
    assert objects[3] == {"line_no": 146, "kind": "spec_decode", "acceptance_rate": 0.188,
                          "mean_acceptance_length": 1.56, "accepted": 111, "drafted": 591,
                          "per_position": [0.563, 0.0, 0.0], "accepted_tps": 9.82, "drafted_tps": 52.29}


def test_stdin():
    result = runner.invoke(app, ["parse-log", "-"], input=CAPTURED.read_bytes())
    assert result.exit_code == 0, result.output
    assert [o["line_no"] for o in _objects(result.stdout)] == [27, 139, 145, 146, 147, 148, 151, 152]


def test_fatal_line_fields(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("starting\n(APIServer pid=1) OSError: [Errno 98] Address already in use\n")
    result = runner.invoke(app, ["parse-log", str(log)])
    assert result.exit_code == 0
    assert _objects(result.stdout) == [
        {"line_no": 2, "kind": "fatal", "fatal_kind": "port_in_use",
         "message": "OSError: [Errno 98] Address already in use"},
    ]


def test_line_numbers_count_newlines_only_and_bad_bytes_are_read(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(
        b"Loading shards:   0% | 0/1\rLoading shards: 100% | 1/1\n"  # a progress bar redrawn with \r
        b"\xff\xfe not utf-8\n"
        b"INFO:     Application startup complete.\r\n"
        b"no newline at the end: EngineCore failed to start."
    )
    result = runner.invoke(app, ["parse-log", str(log)])
    assert result.exit_code == 0, result.output
    assert [(o["line_no"], o["kind"]) for o in _objects(result.stdout)] == [(3, "engine_ready")]


def test_empty_file(tmp_path):
    log = tmp_path / "empty.log"
    log.write_bytes(b"")
    result = runner.invoke(app, ["parse-log", str(log)])
    assert (result.exit_code, result.stdout) == (0, "")


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.log"
    result = runner.invoke(app, ["parse-log", str(missing)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert str(missing) in result.stderr
    assert "No such file or directory" in result.stderr
    assert "- to read standard input" in result.stderr


def test_directory_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["parse-log", str(tmp_path)])
    assert result.exit_code == 2
    assert "Is a directory" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_is_a_clear_error(tmp_path):
    log = tmp_path / "secret.log"
    log.write_text("INFO:     Application startup complete.\n")
    log.chmod(0)
    try:
        result = runner.invoke(app, ["parse-log", str(log)])
    finally:
        log.chmod(0o600)
    assert result.exit_code == 2
    assert "Permission denied" in result.stderr


def test_missing_argument_is_a_usage_error():
    result = runner.invoke(app, ["parse-log"])
    assert result.exit_code == 2


def test_streams_large_input_and_stops_quietly_when_the_reader_leaves(tmp_path):
    # 200k lines through a real pipe into `head -n 2`: the first objects arrive, then the pipe closes; the command
    # must end with status 0 and no traceback rather than fail on the closed pipe.
    line = (
        "(APIServer pid=1) INFO 11-30 12:31:49 [loggers.py:335] Engine 000: Avg prompt throughput: 3.8 tokens/s, Avg "
        "generation throughput: 2.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.2%\n"
    )
    log = tmp_path / "big.log"
    log.write_text(line * 200_000)
    code = (
        "import sys, caovan_manager.cli.parse_log; from caovan_manager.cli.app import app; "
        "app(['parse-log', sys.argv[1]])"
    )
    producer = subprocess.Popen([sys.executable, "-c", code, str(log)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    first = [producer.stdout.readline() for _ in range(2)]
    producer.stdout.close()
    stderr = producer.stderr.read()
    assert producer.wait(timeout=60) == 0, stderr
    assert stderr == b""
    assert [json.loads(x)["line_no"] for x in first] == [1, 2]
