"""The process environment: cache directories the engine writes, and variables of the retired FlashQLA path."""

from __future__ import annotations

import getpass
import os
import tempfile
import uuid
from pathlib import Path

from caovan_kernels.contract import STALE_ENV_PREFIXES

from .report import Check, CheckStatus


def cache_dirs() -> list[tuple[str, Path, bool]]:
    """(variable, directory, whether the variable is set) for each cache the engine writes into."""
    home = Path.home()
    defaults = {
        "CAOVAN_CACHE_DIR": home / ".cache" / "caovan",
        "TRITON_CACHE_DIR": home / ".triton" / "cache",
        "TORCHINDUCTOR_CACHE_DIR": Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}",
    }
    return [(var, Path(os.environ[var]).expanduser() if os.environ.get(var) else path, bool(os.environ.get(var)))
            for var, path in defaults.items()]


def _writable(directory: Path) -> tuple[bool, str]:
    """Probe with a file where the directory exists; else the nearest existing parent must allow creating it."""
    if directory.is_dir():
        probe = directory / f".caovan-doctor-{uuid.uuid4().hex}"
        try:
            probe.write_text("probe")
            probe.unlink()
            return True, "writable"
        except OSError as exc:
            return False, f"not writable ({exc.strerror})"
    if directory.exists():
        return False, "exists but is not a directory"
    parent = directory.parent
    while not parent.exists():
        parent = parent.parent
    if os.access(parent, os.W_OK | os.X_OK):
        return True, f"absent; will be created under {parent}"
    return False, f"absent, and {parent} is not writable"


def check_cache_dirs() -> list[Check]:
    checks = []
    for var, directory, is_set in cache_dirs():
        ok, how = _writable(directory)
        source = var if is_set else f"default of {var}"
        detail = f"{directory} ({source}): {how}"
        checks.append(Check("cache-dirs", var, CheckStatus.PASS, detail) if ok else Check(
            "cache-dirs", var, CheckStatus.FAIL, detail,
            f"export {var}=<a writable directory>, or fix its permissions"))
    return checks


def check_stale_flashqla() -> list[Check]:
    stale = sorted(v for v in os.environ if v.startswith(STALE_ENV_PREFIXES))
    if not stale:
        return [Check("flashqla-env", "stale FlashQLA variables", CheckStatus.PASS,
                      "no " + ", ".join(f"{prefix}*" for prefix in STALE_ENV_PREFIXES) + " set")]
    return [Check("flashqla-env", "stale FlashQLA variables", CheckStatus.WARN,
                  f"set: {', '.join(stale)} (the FlashQLA path they configured is gone; Caovan ignores them)",
                  f"remove them: unset {' '.join(stale)}")]
