"""Which copy of the plugin this interpreter imports, against the installed `caovan` distribution: an old copy, or a
`caovan_kernels` folder in the working directory, silently shadows the installed one (vLLM then loads that copy
in every engine process)."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

import caovan_kernels

from .report import Check, CheckStatus

DISTRIBUTION = "caovan"
PACKAGE = "caovan_kernels"


def installed_package_init(dist: importlib.metadata.Distribution) -> Path | None:
    """Where the installed distribution's caovan_kernels/__init__.py is: from its file list, or for an editable
    install from the source directory it points at; None if neither says."""
    for f in dist.files or ():
        if str(f).replace("\\", "/") == f"{PACKAGE}/__init__.py":
            return Path(dist.locate_file(f)).resolve()
    direct_url = dist.read_text("direct_url.json")
    if direct_url:
        info = json.loads(direct_url)
        if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith("file:"):
            return (Path(unquote(urlparse(info["url"]).path)) / PACKAGE / "__init__.py").resolve()
    return None


def check_plugin_copy() -> list[Check]:
    imported = Path(caovan_kernels.__file__).resolve()
    version = getattr(caovan_kernels, "__version__", "unknown")
    found = f"{PACKAGE} {version} from {imported.parent}"
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return [Check("plugin-copy", "plugin copy", CheckStatus.WARN,
                      f"{found}, but no `{DISTRIBUTION}` distribution is installed: vLLM will not load the plugin "
                      "(no entry point)",
                      "pip install caovan (or pip install -e . in a checkout)")]
    expected = installed_package_init(dist)
    checks = []
    if version != dist.version:
        checks.append(Check("plugin-copy", "plugin copy", CheckStatus.FAIL,
                            f"{found}, but the installed {DISTRIBUTION} is {dist.version}: an old copy shadows it",
                            f"remove or rename {imported.parent} (or start from another directory), then "
                            f"pip install --force-reinstall {DISTRIBUTION}"))
    elif expected is not None and expected != imported:
        checks.append(Check("plugin-copy", "plugin copy", CheckStatus.FAIL,
                            f"{found}, but {DISTRIBUTION} {dist.version} is installed at {expected.parent}: the copy "
                            f"in {imported.parent.parent} shadows it",
                            f"remove or rename {imported.parent}, or start from another directory"))
    else:
        where = f"the installed {DISTRIBUTION} {dist.version}" + ("" if expected else " (its location unrecorded)")
        checks.append(Check("plugin-copy", "plugin copy", CheckStatus.PASS, f"{found} = {where}"))
    local = (Path(os.getcwd()) / PACKAGE / "__init__.py").resolve()
    if local.is_file() and local != imported:
        checks.append(Check("plugin-copy", "working directory", CheckStatus.WARN,
                            f"{local.parent} would shadow the installed plugin in an engine started from here with "
                            "`python -m` (the working directory comes first on sys.path)",
                            "start the engine from another directory, or remove that folder"))
    return checks
