"""A store version launched with the daemon's engine environment is the one Python and vLLM's plugin loader see."""

from __future__ import annotations

import json
import subprocess

import caovan_kernels
from caovan_manager.config import load_settings
from caovan_manager.engine.launch import EngineTarget, build_launch
from caovan_manager.plugins.store import PluginStore

from .plugin_builds import build_wheel

PROBE = """
import json, importlib.metadata as md, caovan_kernels
eps = [ep for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "caovan"]
module = eps[0].load().__module__
import sys
print(json.dumps({"version": caovan_kernels.__version__, "file": caovan_kernels.__file__,
                  "dist": md.version("caovan"), "entry_points": len(eps),
                  "plugin_file": sys.modules[module].__file__}))
"""


def test_store_version_wins_over_the_installed_one(tmp_path):
    version = f"{caovan_kernels.__version__}.post7"
    store = PluginStore(tmp_path / "plugins")
    store.add(build_wheel(tmp_path, version))
    settings = load_settings(state_dir=str(tmp_path / "state"))
    site = store.site_dir(version)
    spec = build_launch(settings, EngineTarget("unused", []), tmp_path / "run-0.sock", tmp_path / "run", site)
    (tmp_path / "run").mkdir()
    # the same interpreter and environment the engine gets, from its working directory
    out = subprocess.run([spec.command[0], "-c", PROBE], env=spec.env, cwd=spec.cwd, capture_output=True, text=True,
                         check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["version"] == version and seen["dist"] == version and seen["entry_points"] == 1
    assert seen["file"].startswith(str(site)) and seen["plugin_file"].startswith(str(site))

    bundled = build_launch(settings, EngineTarget("unused", []), tmp_path / "run-0.sock", tmp_path / "run", None)
    out = subprocess.run([bundled.command[0], "-c", PROBE], env=bundled.env, cwd=bundled.cwd, capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["version"] == caovan_kernels.__version__
