"""A user who installs the package (`pip install ".[gpu]"` builds a wheel), not an editable checkout, gets the
dashboard too."""

import subprocess
import sys
import zipfile

from tests.caovan_manager.plugins.plugin_builds import build_wheel

DASHBOARD = ["index.html", "app.js", "chart.js", "admin.js", "style.css", "grafana/caovan-dashboard.json",
             "prometheus/prometheus.yml"]


def test_installed_wheel_serves_the_dashboard_from_its_own_files(tmp_path):
    wheel = build_wheel(tmp_path, "0.0.1", with_web=True)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in DASHBOARD if f"caovan_manager/web/{f}" not in names]
    assert not missing, f"the wheel lacks dashboard files: {missing}"
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # The daemon's own lookup, run from the unpacked wheel in a fresh interpreter (the checkout out of its path).
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import caovan_manager.app as a; "
             "d = a.default_web_dir(); print(a.__file__); print(d); print((d / 'index.html').is_file())")
    out = subprocess.run([sys.executable, "-c", probe, str(site)], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(site)), out
    assert out[1] == str(site / "caovan_manager" / "web") and out[2] == "True", out
