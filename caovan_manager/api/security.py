"""Who may call what: admin keys for control calls, inference keys for /v1/* only, /metrics open or keyed
(security.metrics_keys). Without admin keys, admin calls are taken from this machine's own addresses only.

Keys are compared in constant time and never echoed: not in errors, not in /status, not in logs. The dependencies
are `async def` although they never wait: FastAPI runs a plain `def` dependency in its thread pool (a thread hop).
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import HTTPException, Request, status
from pydantic import SecretStr

from caovan_manager.config import SecuritySettings, Settings


def _presented_key(authorization: str | None) -> str | None:
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def _matches(presented: str | None, keys: list[SecretStr]) -> bool:
    if presented is None:
        return False
    candidate = presented.encode()
    return any(hmac.compare_digest(candidate, key.get_secret_value().encode()) for key in keys)


def refusal(what: str) -> str:
    """The message of a 401: what needed a key and how to send one (never the key that was sent)."""
    return (f"{what} needs a valid key: send it as `Authorization: Bearer <key>` "
            f"(keys are set in the daemon's configuration, security.*)")


def _refuse(what: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=refusal(what), headers={"WWW-Authenticate": "Bearer"})


def is_loopback(host: str | None) -> bool:
    """Is a peer address this machine's own (127.0.0.0/8, ::1, or IPv4 mapped into IPv6)?"""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


async def require_admin(request: Request) -> None:
    keys = request.app.state.daemon.settings.security.admin_keys
    if keys:
        if not _matches(_presented_key(request.headers.get("authorization")), keys):
            raise _refuse("this is an admin call and")
    elif not is_loopback(request.client.host if request.client else None):
        # Without admin keys only this machine may act: a daemon bound to a public address (and warned about it at
        # start) still serves /v1 to everyone, as vLLM does, but no one else can stop or swap its engines.
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=(
            "admin calls from other machines need an admin key, and none is configured: set security.admin_keys "
            "(CAOVAN_SECURITY__ADMIN_KEYS) on the daemon, or make the call from the daemon's own machine"))


def inference_key_accepted(security: SecuritySettings, authorization: str | None) -> bool:
    """May a request with this Authorization header use /v1/*? (The relay is plain ASGI, so it asks with the
    header itself.) An admin key may also use the API; an inference key reaches nothing else."""
    if not security.inference_keys:
        return True
    return _matches(_presented_key(authorization), security.inference_keys + security.admin_keys)


async def require_metrics_access(request: Request) -> None:
    security = request.app.state.daemon.settings.security
    presented = _presented_key(request.headers.get("authorization"))
    if security.metrics_keys and not _matches(presented, security.metrics_keys + security.admin_keys):
        raise _refuse("/metrics (security.metrics_keys is set, so it)")


def exposure_warnings(settings: Settings) -> list[str]:
    """What a daemon listening beyond this machine leaves open, in words for its log (empty on a loopback address)."""
    host = settings.host
    if host == "localhost" or is_loopback(host):
        return []
    security = settings.security
    where = f"the daemon listens on {host}:{settings.port}, reachable from other machines"
    warnings = []
    if not security.admin_keys:
        warnings.append(f"{where}, without security.admin_keys: admin calls (restart, stop, plugin activation, model "
                        f"load/unload) are refused from other machines until you set one; only this machine can make "
                        f"them")
    if not security.inference_keys:
        warnings.append(f"{where}, without security.inference_keys: anyone who reaches it can use the OpenAI API")
    if not security.metrics_keys:
        warnings.append(f"{where}, without security.metrics_keys: anyone who reaches it can read /metrics")
    return warnings
