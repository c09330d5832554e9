"""Who may call what: admin keys for control calls, inference keys for /v1/* only, /metrics open or keyed
(security.metrics_keys).

Keys are compared in constant time and never echoed: not in errors, not in /status, not in logs. The checks are
`async def` although they never wait: FastAPI runs a plain `def` dependency in its thread pool, a thread hop on
every proxied request.
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status
from pydantic import SecretStr


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def _matches(presented: str | None, keys: list[SecretStr]) -> bool:
    if presented is None:
        return False
    candidate = presented.encode()
    return any(hmac.compare_digest(candidate, key.get_secret_value().encode()) for key in keys)


def _refuse(what: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED,
                         detail=f"{what} needs a valid key: send it as `Authorization: Bearer <key>` "
                                f"(keys are set in the daemon's configuration, security.*)",
                         headers={"WWW-Authenticate": "Bearer"})


async def require_admin(request: Request) -> None:
    keys = request.app.state.daemon.settings.security.admin_keys
    if keys and not _matches(_presented_key(request), keys):
        raise _refuse(f"{request.method} {request.url.path} is an admin call and")


async def require_inference(request: Request) -> None:
    security = request.app.state.daemon.settings.security
    if not security.inference_keys:
        return
    # An admin key may also use the API; an inference key reaches nothing else.
    if not _matches(_presented_key(request), security.inference_keys + security.admin_keys):
        raise _refuse("the OpenAI API")


async def require_metrics_access(request: Request) -> None:
    security = request.app.state.daemon.settings.security
    if security.metrics_keys and not _matches(_presented_key(request), security.metrics_keys + security.admin_keys):
        raise _refuse("/metrics (security.metrics_keys is set, so it)")
