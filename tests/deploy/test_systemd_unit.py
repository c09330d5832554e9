"""deploy/systemd/caovan.service: systemd accepts it without a warning, and every CAOVAN_* setting it sets is one the
daemon knows (a misspelt one would be ignored by systemd and by the daemon alike)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from caovan_manager.config import Settings, load_settings

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "caovan.service"


def test_systemd_verifies_the_unit_without_a_warning(tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: make test installs it (scripts/install-test-tools.sh)"
    caovan = Path(sys.executable).with_name("caovan")
    unit = tmp_path / "caovan.service"
    # The unit names the usual install path; here the checkout's own command stands in for it.
    unit.write_text(UNIT.read_text().replace("/opt/caovan/venv/bin/caovan", str(caovan)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_the_units_settings_are_the_daemons(tmp_path, monkeypatch):
    text = UNIT.read_text()
    assert re.search(r"^ExecStart=\S+/caovan serve ", text, re.M)
    env = dict(re.findall(r"^Environment=(CAOVAN_\w+)=(\S+)$", text, re.M))
    assert "CAOVAN_LOGS__CONSOLE" in env
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("/var/lib/caovan", str(tmp_path)))
        top = name[len("CAOVAN_"):].split("__")[0].lower()
        assert top in Settings.model_fields or name == "CAOVAN_CACHE_DIR", f"{name} is no daemon setting"
    settings = load_settings()
    assert settings.logs.console and settings.state_dir == tmp_path
