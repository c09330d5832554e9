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


# A real fault of the kind vllm#53051 shipped: every GDN state write skipped (the chunked prefill's final state and
# the decode step's), so decoding starts from a state slot that never held the prompt; /health, throughput and
# acceptance look normal. Each pair: the file under caovan_kernels/gdn, the line, its broken form.
SKIPPED_STATE_WRITES = (
    ("chunk.py",
     "        h0_mode, ht_mode = STATE_CACHE_SLOTS, (STATE_CACHE_SLOTS if output_final_state else STATE_NONE)\n",
     "        h0_mode, ht_mode = STATE_CACHE_SLOTS, STATE_NONE  # deliberately broken build (test)\n"),
    ("recurrent.py", "            write_mode = WRITE_SPEC_SLOTS if ssm_state_indices.dim() == 2 else WRITE_SLOT\n",
     "            write_mode = WRITE_NONE  # deliberately broken build (test)\n"),
)


# A decode that garbles the whole GDN state cache on every step: what a wrong state write does to the answers, with
# an outcome that does not depend on what memory the build never wrote happens to hold (skipped writes leave the
# slots as allocated, which on some machines reads as a harmless zero state: docs/verification.md).
CORRUPTED_STATE = ("recurrent.py", "        final = initial_state\n",
                   "        initial_state.mul_(-8.0)  # deliberately broken build (test)\n"
                   "        final = initial_state\n")


def build_wheel(workdir: Path, version: str, broken: bool = False, with_web: bool = False,
                skip_state_writes: bool = False, corrupt_state: bool = False) -> Path:
    """Copy the source tree, set caovan_kernels.__version__, optionally make the plugin's register() raise, its
    kernels skip the GDN state writes or its decode garble the state, and build a wheel with pip (no network: no build
    isolation, no dependencies). Plugin builds leave the dashboard out (smaller, faster); with_web keeps it, as a
    release wheel has it."""
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
    patches = (*(SKIPPED_STATE_WRITES if skip_state_writes else ()), *((CORRUPTED_STATE,) if corrupt_state else ()))
    for name, line, broken_line in patches:
        kernel = source / "caovan_kernels" / "gdn" / name
        original = kernel.read_text()
        assert original.count(line) == 1, f"caovan_kernels/gdn/{name} has no line {line.strip()!r} to break"
        kernel.write_text(original.replace(line, broken_line))
    if not (source / "README.md").exists():
        (source / "README.md").write_text("Caovan\n")
    out = workdir / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
                    str(out), str(source)], check=True, capture_output=True)
    return next(out.glob(f"caovan-{version}-*.whl"))
