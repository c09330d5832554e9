"""Installed plugin versions: <store>/<version>/site holds one version of the `caovan` distribution.

Each version is installed with `pip install --no-deps --target`, so versions sit side by side without touching the
daemon's own environment; the engine gets a version's site folder first on PYTHONPATH (see engine.launch). Version
names are checked before any path is built from them, so no name can point outside the store.
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from caovan_manager.errors import PluginStoreError, UnknownVersion

VERSION_PATTERN = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
DISTRIBUTION = "caovan"
PLUGIN_PACKAGE = "caovan_kernels"


def check_version(version: str) -> str:
    if not VERSION_PATTERN.fullmatch(version) or ".." in version:
        raise PluginStoreError("invalid plugin version name: use letters, digits and . + _ - only "
                               "(like 0.2.0), at most 64 characters")
    return version


class PluginStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def version_dir(self, version: str) -> Path:
        check_version(version)
        root = self.root.resolve()
        path = (root / version).resolve()
        if path.parent != root:  # belt and braces: the pattern already forbids separators
            raise PluginStoreError(f"plugin version {version!r} resolves outside the store")
        return path

    def site_dir(self, version: str | None) -> Path | None:
        """The site folder of an installed version; None for the plugin bundled with the daemon."""
        if version is None:
            return None
        site = self.version_dir(version) / "site"
        if not (site / PLUGIN_PACKAGE).is_dir():
            raise UnknownVersion(f"plugin version {version} is not installed in {self.root}; "
                                 f"see `caovan plugins list`, add it with `caovan plugins add WHEEL`")
        return site

    def has(self, version: str) -> bool:
        try:
            self.site_dir(version)
        except PluginStoreError:
            return False
        return True

    def versions(self) -> list[dict[str, Any]]:
        if not self.root.is_dir():
            return []
        found = []
        for meta in sorted(self.root.glob("*/meta.json")):
            try:
                found.append(json.loads(meta.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def add(self, source: Path) -> dict[str, Any]:
        """Install a wheel or a source folder of the `caovan` distribution as a new version."""
        source = source.resolve()
        if source.is_file() and source.suffix == ".whl":
            build_flags: list[str] = []
        elif source.is_dir() and ((source / "pyproject.toml").is_file() or (source / "setup.py").is_file()):
            build_flags = ["--no-build-isolation"]  # build offline with the daemon's own setuptools
        else:
            raise PluginStoreError(f"{source} is neither a wheel (.whl) nor a project folder with a pyproject.toml; "
                                   f"give `caovan plugins add` one of those")
        self.root.mkdir(parents=True, exist_ok=True)
        incoming = self.root / f".incoming-{uuid.uuid4().hex[:8]}"
        try:
            site = incoming / "site"
            command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet",
                       "--disable-pip-version-check", *build_flags, "--target", str(site), str(source)]
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise PluginStoreError(f"installing {source.name} failed (pip exit {result.returncode}):\n"
                                       f"{(result.stderr or result.stdout).strip()[-2000:]}")
            version = self._installed_version(site, source)
            target = self.version_dir(version)
            if target.exists():
                raise PluginStoreError(f"plugin version {version} is already in the store ({target}); versions are "
                                       f"immutable: build the new one with another version string")
            meta = {"version": version, "source": str(source), "installed_at": time.time()}
            (incoming / "meta.json").write_text(json.dumps(meta, indent=2))
            incoming.rename(target)
            return meta
        finally:
            shutil.rmtree(incoming, ignore_errors=True)

    def _installed_version(self, site: Path, source: Path) -> str:
        infos = [path for path in site.glob("*.dist-info")
                 if path.name.split("-")[0].replace("_", "-").lower() == DISTRIBUTION]
        if not infos or not (site / PLUGIN_PACKAGE / "__init__.py").is_file():
            names = sorted(path.name for path in site.iterdir())
            raise PluginStoreError(f"{source.name} is not a Caovan plugin: it installs {names}, not the `caovan` "
                                   f"distribution with the {PLUGIN_PACKAGE} package")
        metadata = email.parser.Parser().parsestr((infos[0] / "METADATA").read_text())
        return check_version(metadata["Version"])
