"""The REST surface, generated from the daemon's OpenAPI document, against the daemon with its engine stopped (the
same against the real CPU engine: tests/integration/daemon/test_openapi_properties.py). Keys of all three kinds
are set, so every refusal path is reached."""

from __future__ import annotations

import schemathesis

from tests.support.api_properties import fuzz
from tests.support.served import served_daemon

ADMIN, INFER, METRICS = "adm-7f3c-fuzz", "inf-91aa-fuzz", "met-55b0-fuzz"
KEYS = {"no key": None, "wrong key": "wrong-key-0000", "inference key": INFER, "metrics key": METRICS,
        "admin key": ADMIN}


def test_every_operation_with_every_key(tmp_path):
    security = {"admin_keys": [ADMIN], "inference_keys": [INFER], "metrics_keys": [METRICS]}
    with served_daemon(tmp_path, security=security) as served:
        schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
        # The admin key would start an engine that cannot start here (no model): starting and restarting are the
        # engine tests' business.
        tested = fuzz(schema, KEYS, ADMIN, max_examples=25, admin_skips={("POST", "/start"), ("POST", "/restart")})
    assert {"GET /status", "POST /restart", "POST /plugins/{version}/activate", "GET /metrics/engine"} <= set(tested)
