"""Real wheels of this project under another version string, for plugin-store and swap tests."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# What a wheel never holds; the test Tritons (.triton-matrix, gigabytes) and test outputs above all.
SKIP = (".venv", ".git", "tests", "docs", "benchmarks", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
        ".pytest_cache", ".triton-matrix", "test-artifacts", ".gpu")


def build_wheel(workdir: Path, version: str, broken: bool = False, with_web: bool = False) -> Path:
    """Copy the source tree, set caovan_kernels.__version__, optionally make the plugin's register() raise, and
    build a wheel with pip (no network: no build isolation, no dependencies). Plugin builds leave the dashboard
    out (smaller, faster); with_web keeps it, as a release wheel has it."""
    source = workdir / f"src-{version}"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*SKIP, *(() if with_web else ("web",))))
    init = source / "caovan_kernels" / "__init__.py"
    text, count = re.subn(r'__version__ = "[^"]+"', f'__version__ = "{version}"', init.read_text())
    assert count == 1, "caovan_kernels/__init__.py has no __version__ line to replace"
    init.write_text(text)
    if broken:
        plugin = source / "caovan_kernels" / "vllm" / "plugin.py"
        original = plugin.read_text()
        patched = original.replace("def register() -> None:\n", "def register() -> None:\n    raise RuntimeError("
                                   "'this plugin build is deliberately broken (test)')\n")
        assert patched != original, "caovan_kernels/vllm/plugin.py has no register() to break"
        plugin.write_text(patched)
    if not (source / "README.md").exists():
        (source / "README.md").write_text("Caovan\n")
    out = workdir / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
                    str(out), str(source)], check=True, capture_output=True)
    return next(out.glob(f"caovan-{version}-*.whl"))
