"""Property tests of the daemon's REST surface, generated from its own OpenAPI document by schemathesis: every
operation with no key, a wrong key, an inference key and an admin key. Never a 5xx (a 502/503 the document names
for the engine's state is an answer, not a failure), every answer in its documented status and schema, and every
admin operation refuses every key but the admin's."""

from __future__ import annotations

from collections.abc import Iterable

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# Not schemathesis's not_a_server_error: it counts every 5xx, and the daemon answers 503 (and the engine proxies 502)
# by design while the engine is not ready. Those are documented per operation; anything else of 5xx is a fault.
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]
ENGINE_STATE_ANSWERS = (502, 503)
# Endpoints that stream until the client leaves: a request to them never ends, so they are tested by reading their
# first events (tests/integration/daemon/test_main_flow.py), not here.
STREAMS = ("/logs/stream", "/events")
ADMIN_OPERATIONS = {("POST", "/start"), ("POST", "/stop"), ("POST", "/restart"),
                    ("POST", "/plugins/{version}/activate"), ("POST", "/draft-vocab")}


def headers_for(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def check_case(case: schemathesis.Case, keys: dict[str, str | None], admin_key: str,
               admin_skips: Iterable[tuple[str, str]] = ()) -> None:
    """Send `case` once per key (name -> key) and check each answer."""
    if case.path == "/doctor" and case.query:
        # refresh reruns a 20-second doctor subprocess; the fuzz reads the cached report (refresh is tested apart).
        case.query = {name: value for name, value in case.query.items() if name != "refresh"}
    operation = (case.method.upper(), case.path)
    for name, key in keys.items():
        if key == admin_key and operation in set(admin_skips):
            continue
        # The first /doctor runs the doctor (about 20 s on two busy cores); later ones read its cache.
        response = case.call_and_validate(headers=headers_for(key), checks=CHECKS, timeout=300)
        assert response.status_code < 500 or response.status_code in ENGINE_STATE_ANSWERS, (
            name, operation, response.status_code, response.text[:300])
        if operation in ADMIN_OPERATIONS and key != admin_key:
            # The front door comes first: a generated path it cannot read one way is a 400, and without any
            # Authorization header a call that sends no JSON body is a 415 (a form a web page could send
            # cross-site); the rest reach the key check.
            refusals = (400, 401) if key is not None else (400, 401, 415)
            assert response.status_code in refusals, (name, operation, response.status_code, response.text[:300])
        for secret in keys.values():
            assert secret is None or secret == "wrong-key-0000" or secret not in response.text, (name, operation)


def fuzz(schema: schemathesis.BaseSchema, keys: dict[str, str | None], admin_key: str, max_examples: int,
         admin_skips: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Every operation of the schema (but the streams), `max_examples` generated cases each, every case with every
    key; returns the operations tested. A failing case fails with hypothesis's shrunk example and its seed."""
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in STREAMS:
            continue

        @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def each(case: schemathesis.Case) -> None:
            check_case(case, keys, admin_key, admin_skips)

        each()
        tested.append(operation.label)
    return tested
