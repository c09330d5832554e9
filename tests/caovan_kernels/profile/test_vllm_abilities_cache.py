"""The inspected vLLM's abilities are kept in Caovan's cache: a later engine start plans without importing vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from caovan_kernels.profile.vllm_abilities import VllmAbilities

ROOT = Path(__file__).resolve().parents[3]
DETECT = """
import dataclasses, json, sys
from caovan_kernels.profile.vllm_abilities import detect_vllm
a = detect_vllm()
canonical = dataclasses.asdict(a) | {"deprecated": sorted(a.deprecated)}
print(json.dumps({"imported_vllm": "vllm" in sys.modules, "abilities": canonical, "version": a.version}))
"""


def _canonical(abilities: VllmAbilities) -> dict:
    """As the child prints it (JSON: tuples become lists; the frozenset sorted)."""
    return json.loads(json.dumps(asdict(abilities) | {"deprecated": sorted(abilities.deprecated)}))


def _detect(cache: Path) -> dict:
    env = {**os.environ, "CAOVAN_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", DETECT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_start_plans_from_the_cache_and_a_bad_entry_is_inspected_again(tmp_path, installed_vllm):
    first = _detect(tmp_path)
    assert first["imported_vllm"] and first["abilities"] == _canonical(installed_vllm)
    (entry,) = (tmp_path / "vllm-abilities").glob("*.json")
    second = _detect(tmp_path)
    assert not second["imported_vllm"] and second["abilities"] == first["abilities"]
    entry.write_text('{"version": "9.9", "truncated')  # a torn write of another layout
    again = _detect(tmp_path)
    assert again["imported_vllm"] and again["abilities"] == first["abilities"]
    assert json.loads(entry.read_text())["version"] == installed_vllm.version
