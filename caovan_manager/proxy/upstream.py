"""The way to one engine run: its private Unix socket and the two clients that talk over it.

The engine listens on no TCP port at all, only on a socket in a folder that only the daemon's user can enter, so
another local user of the machine cannot reach any of its routes (its developer routes included); the daemon is the
only door. The relay's aiohttp session carries the OpenAI traffic (aiohttp costs a third of httpx's CPU per request
there: docs/benchmarks.md); the httpx client carries the daemon's own calls (readiness, progress, sleep and wake-up,
the verification benchmark, /metrics/engine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx

from caovan_manager.config import ProxySettings
from caovan_manager.errors import SocketFolderError

# On a Unix socket the host part only fills the Host header.
BASE_URL = "http://localhost"
# aiohttp adds these unless told not to; the client's own, where it sent them, pass through.
NO_AUTO_HEADERS = ("Accept-Encoding", "User-Agent", "Content-Type")
# vLLM's server closes idle connections after 5 s; dropping ours first avoids sending on one it is closing.
KEEPALIVE_S = 4.0
# A Unix socket path is at most 107 bytes on Linux; the folder's own name is short, the system's temp folder may not be.
MAX_SOCKET_PATH = 107


def make_socket_folder() -> Path:
    """A fresh folder only the daemon's user can enter (mode 0700, a random name: nobody can have made it first)."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="caovan-"))
    except OSError as exc:
        raise SocketFolderError(f"could not create a private folder for the engines' sockets in "
                                f"{tempfile.gettempdir()} ({exc}); set TMPDIR to a writable folder") from None
    if len(str(folder / "run-000000000.sock")) > MAX_SOCKET_PATH:
        shutil.rmtree(folder, ignore_errors=True)
        raise SocketFolderError(f"the temporary folder {tempfile.gettempdir()} has too long a path for a Unix socket "
                                f"({MAX_SOCKET_PATH} bytes at most); set TMPDIR to a shorter one, like /tmp")
    os.chmod(folder, 0o700)
    return folder


def remove_socket_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Upstream:
    """One engine run's socket and its clients; made when the run is spawned, closed when it is stopped."""

    socket_path: Path
    relay: aiohttp.ClientSession
    client: httpx.AsyncClient

    @property
    def address(self) -> str:
        return f"unix:{self.socket_path}"

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):  # closing a session whose socket is already gone
            await self.relay.close()
        await self.client.aclose()


def open_upstream(socket_path: Path, proxy: ProxySettings, headers: dict[str, str]) -> Upstream:
    """The clients of one engine run (in the running loop). `headers`: the engine's own --api-key, if the user gave
    one, for the daemon's calls; the relay adds it per request."""
    relay = aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=str(socket_path), limit=0, keepalive_timeout=KEEPALIVE_S),
        timeout=aiohttp.ClientTimeout(total=None, connect=proxy.connect_timeout_s, sock_read=proxy.read_timeout_s),
        # A relay wants no cookie jar (it would carry one user's cookies into everyone's requests) and no
        # decompression (the bytes pass through).
        cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False, skip_auto_headers=NO_AUTO_HEADERS)
    client = httpx.AsyncClient(base_url=BASE_URL, headers=headers, timeout=httpx.Timeout(30, connect=5),
                               transport=httpx.AsyncHTTPTransport(uds=str(socket_path)))
    return Upstream(socket_path, relay, client)
