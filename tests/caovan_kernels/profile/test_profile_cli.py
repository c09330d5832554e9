"""`caovan profile` through the real `caovan` typer app."""

from __future__ import annotations

import json

from profile_cases import QWEN36_AWQ, TWO_2080TI
from typer.testing import CliRunner

import caovan_manager.cli.profile  # noqa: F401  (registers `caovan profile`)
from caovan_manager.cli.app import app


def test_json_output_with_pinned_args():
    result = CliRunner().invoke(app, ["profile", str(QWEN36_AWQ), "--gpus", TWO_2080TI, "--json", "--",
                                      "--max-num-seqs", "1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"model", "args", "env", "decisions", "device", "vllm", "memory"}
    assert data["args"][:2] == ["--max-num-seqs", "1"]
    assert {"name", "value", "reason"} == set(data["decisions"][0])
    assert data["memory"]["pool_bytes"] == 11_632_039_608


def test_table_for_humans():
    result = CliRunner().invoke(app, ["profile", str(QWEN36_AWQ), "--gpus", TWO_2080TI, "--vllm-version", "0.33.0"])
    assert result.exit_code == 0, result.output
    for text in ("AutoSpec", "AutoMem", "DynamicTP", "Elastic-KV", "version table for vLLM 0.33.0",
                 "command: caovan-vllm-serve", "--disable-custom-all-reduce"):
        assert text in result.stdout


def test_bad_inputs_exit_2_with_the_reason(tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(app, ["profile", str(QWEN36_AWQ), "--gpus", "1x Frobnicator 24GB"])
    assert unknown.exit_code == 2 and "unknown GPU 'Frobnicator'" in unknown.stderr
    missing = runner.invoke(app, ["profile", str(tmp_path), "--gpus", "cpu"])
    assert missing.exit_code == 2 and f"no config.json in {tmp_path}" in missing.stderr
