"""Key checks and exposure rules, without a web framework: the API's dependencies and the relay (plain ASGI) share
them. Keys are compared in constant time and never echoed: not in errors, not in /status, not in logs."""

from __future__ import annotations

import hmac
import ipaddress

from pydantic import SecretStr

from caovan_manager.config import SecuritySettings, Settings


def presented_key(authorization: str | None) -> str | None:
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def matches(presented: str | None, keys: list[SecretStr]) -> bool:
    if presented is None:
        return False
    candidate = presented.encode()
    return any(hmac.compare_digest(candidate, key.get_secret_value().encode()) for key in keys)


def refusal(what: str) -> str:
    """The message of a 401: what needed a key and how to send one (never the key that was sent)."""
    return (f"{what} needs a valid key: send it as `Authorization: Bearer <key>` "
            f"(keys are set in the daemon's configuration, security.*)")


def is_loopback(host: str | None) -> bool:
    """Is a peer address this machine's own (127.0.0.0/8, ::1, or IPv4 mapped into IPv6)?"""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def inference_key_accepted(security: SecuritySettings, authorization: str | None) -> bool:
    """May a request with this Authorization header use /v1/*? (The relay is plain ASGI, so it asks with the
    header itself.) An admin key may also use the API; an inference key reaches nothing else."""
    if not security.inference_keys:
        return True
    return matches(presented_key(authorization), security.inference_keys + security.admin_keys)


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
