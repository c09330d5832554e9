"""The REST surface, generated from the running daemon's own OpenAPI document (schemathesis), against the real CPU
engine: no key, a wrong key, the inference key, the admin key. The admin key skips stop, restart and the DraftVocab
switch here (they would take the shared engine away for minutes; the fault, restart and DraftVocab tests drive
them)."""

from __future__ import annotations

import pytest
import schemathesis

from tests.support.api_properties import fuzz

from .conftest import ADMIN_KEY, INFERENCE_KEY

pytestmark = pytest.mark.engine

KEYS = {"no key": None, "wrong key": "wrong-key-0000", "inference key": INFERENCE_KEY, "admin key": ADMIN_KEY}


def test_every_operation_with_every_key_on_the_real_engine(daemon):
    schema = schemathesis.openapi.from_url(f"{daemon.url}/openapi.json")
    tested = fuzz(schema, KEYS, ADMIN_KEY, max_examples=12,
                  admin_skips={("POST", "/stop"), ("POST", "/restart"), ("POST", "/draft-vocab")})
    assert {"GET /status", "GET /metrics/engine", "POST /plugins/{version}/activate", "POST /draft-vocab",
            "GET /draft-vocab"} <= set(tested)
    assert daemon.status()["state"] == "ready"
