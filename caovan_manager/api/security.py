"""Who may call what: admin keys for control calls, inference keys for /v1/* only, /metrics open or keyed
(security.metrics_keys). Without admin keys, admin calls are taken from this machine's own addresses only.

The checks themselves are caovan_manager.keys (the relay shares them). The dependencies
are `async def` although they never wait: FastAPI runs a plain `def` dependency in its thread pool (a thread hop).
"""

from __future__ import annotations

from fastapi import HTTPException, Request, status

from caovan_manager.keys import is_loopback, matches, presented_key, refusal


def _refuse(what: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=refusal(what), headers={"WWW-Authenticate": "Bearer"})


async def require_admin(request: Request) -> None:
    keys = request.app.state.daemon.settings.security.admin_keys
    if keys:
        if not matches(presented_key(request.headers.get("authorization")), keys):
            raise _refuse("this is an admin call and")
    elif not is_loopback(request.client.host if request.client else None):
        # Without admin keys only this machine may act: a daemon bound to a public address (and warned about it at
        # start) still serves /v1 to everyone, as vLLM does, but no one else can stop or swap its engines.
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=(
            "admin calls from other machines need an admin key, and none is configured: set security.admin_keys "
            "(CAOVAN_SECURITY__ADMIN_KEYS) on the daemon, or make the call from the daemon's own machine"))


async def require_metrics_access(request: Request) -> None:
    security = request.app.state.daemon.settings.security
    presented = presented_key(request.headers.get("authorization"))
    if security.metrics_keys and not matches(presented, security.metrics_keys + security.admin_keys):
        raise _refuse("/metrics (security.metrics_keys is set, so it)")
