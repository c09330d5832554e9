"""Who may call what: admin keys for control calls, inference keys for /v1/* only, /metrics open or keyed
(security.metrics_keys).

Keys are compared in constant time and never echoed: not in errors, not in /status, not in logs. The dependencies
are `async def` although they never wait: FastAPI runs a plain `def` dependency in its thread pool (a thread hop).
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status
from pydantic import SecretStr

from caovan_manager.config import SecuritySettings


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


async def require_admin(request: Request) -> None:
    keys = request.app.state.daemon.settings.security.admin_keys
    if keys and not _matches(_presented_key(request.headers.get("authorization")), keys):
        raise _refuse(f"{request.method} {request.url.path} is an admin call and")


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
