"""Kernels built with and without TensorCore75 never share a Triton cache entry.

Triton's cache key covers the source, the options, the backend and some environment variables, not a stage hook. While
TensorCore75 is attached, every cache key of the process is re-derived with a tag naming this hook's build (a hash of
its own source files), through Triton's cache-manager setting: a binary built with the hook off, or by another hook
version, is never found, and neither finds ours. Dump and override folders keep Triton's keys (users look files up
there by Triton's names).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path
from typing import Any

from caovan_kernels import __version__


@functools.lru_cache(maxsize=1)
def hook_tag() -> str:
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"caovan-tc75-{digest.hexdigest()[:16]}"


def _retag(key: str, tag: str) -> str:
    digest = hashlib.sha256(f"{key}-{tag}".encode()).digest()
    return base64.b32encode(digest).decode().rstrip("=")


class TaggedCache:
    """Install/remove the re-keying cache-manager class; the user's own manager class (TRITON_CACHE_MANAGER) stays
    the base that stores the files."""

    def __init__(self) -> None:
        self._previous: Any = None  # the user's manager class, if set in Python rather than TRITON_CACHE_MANAGER
        self._installed: type | None = None

    def attach(self) -> None:
        if self._installed is not None:
            return
        from triton import knobs
        from triton.runtime.cache import FileCacheManager

        self._previous = knobs.cache.__dict__.get("manager_class")
        base = knobs.cache.manager_class or FileCacheManager
        tag = hook_tag()

        class TensorCore75Cache(base):  # type: ignore[misc, valid-type]
            def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
                super().__init__(key if (override or dump) else _retag(key, tag), override=override, dump=dump)

        knobs.cache.manager_class = TensorCore75Cache
        self._installed = TensorCore75Cache

    def detach(self) -> None:
        if self._installed is None:
            return
        from triton import knobs

        if knobs.cache.manager_class is self._installed:
            if self._previous is None:
                del knobs.cache.manager_class  # back to TRITON_CACHE_MANAGER / the default; setting None would unset it
            else:
                knobs.cache.manager_class = self._previous
        self._installed = None
