"""The doctor as the daemon runs it: a subprocess whose stdout is only the JSON report; exit code 1 on FAIL."""

from __future__ import annotations

import importlib.metadata
import os

from doctor_cases import VENV_BIN, by_name, run_doctor_process
from typer.testing import CliRunner

import caovan_manager.cli.doctor  # noqa: F401  (registers `caovan doctor`)
from caovan_manager.cli.app import app


def test_console_script_is_declared_for_the_doctor_main():
    (script,) = [e for e in importlib.metadata.distribution("caovan").entry_points
                 if e.group == "console_scripts" and e.name == "caovan-sm75-doctor"]
    assert script.value == "caovan_kernels.doctor.cli:main"


def test_full_report_as_json_subprocess():
    code, report, stderr = run_doctor_process(command=[str(VENV_BIN / "caovan-sm75-doctor")])
    assert set(report) == {"caovan_version", "exit_code", "summary", "checks"}
    assert code == report["exit_code"] == (1 if report["summary"]["FAIL"] else 0)
    assert sum(report["summary"].values()) == len(report["checks"])
    for check in report["checks"]:
        assert set(check) == {"group", "name", "status", "detail", "fix"}
        assert check["status"] in {"PASS", "WARN", "FAIL", "SKIP"}
    assert by_name(report)["tl.dot on sm_75 (Caovan's target; no GPU here)"]["status"] == "WARN"


def test_exit_code_1_on_fail(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    env = {**os.environ, "CAOVAN_CACHE_DIR": str(not_a_dir)}
    code, report, _ = run_doctor_process("--only", "cache-dirs", env=env)
    assert code == 1 and report["exit_code"] == 1 and report["summary"]["FAIL"] == 1


def test_caovan_doctor_command():
    runner = CliRunner()
    result = runner.invoke(app, ["doctor", "--json", "--only", "python", "--only", "flashqla-env"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and '"name": "Python"' in result.stdout
    text = runner.invoke(app, ["doctor", "--only", "python"])
    assert text.exit_code == 0 and "Caovan doctor" in text.stdout and "PASS" in text.stdout
    bad = runner.invoke(app, ["doctor", "--only", "bogus"])
    assert bad.exit_code == 2 and "unknown check" in bad.stderr
