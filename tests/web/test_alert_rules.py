"""The OutputLock alert rules (web/prometheus/alerts.yml): valid for the real promtool, and firing as promtool's own
unit tests (tests/web/alerts_test.yml) say: degraded for a minute is critical, a canary that stopped passing on a
ready engine is a warning, and neither fires for the other models."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .browser import INSTALL_HINT

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "web" / "prometheus" / "alerts.yml"


@pytest.mark.parametrize("command", [["check", "rules", str(RULES)], ["test", "rules", str(HERE / "alerts_test.yml")]],
                         ids=["check", "unit-tests"])
def test_promtool_accepts_the_rules(command):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(f"missing promtool: {INSTALL_HINT}")
    result = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
