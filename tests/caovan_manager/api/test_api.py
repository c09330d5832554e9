"""The daemon's HTTP surface with the engine stopped: security, input validation, status, metrics, 503s."""

from __future__ import annotations

import types

import pytest
from fastapi.testclient import TestClient

from caovan_manager.api import doctor as doctor_api
from caovan_manager.app import create_app
from caovan_manager.config import load_settings
from caovan_manager.engine.launch import EngineTarget
from tests.caovan_manager.api import LOCAL

ADMIN = "adm-7f3c-secret"
INFER = "inf-91aa-secret"
METRICS = "met-55b0-secret"


@pytest.fixture
def client(tmp_path):
    settings = load_settings(state_dir=str(tmp_path), security={
        "admin_keys": [ADMIN], "inference_keys": [INFER], "metrics_keys": [METRICS]})
    target = EngineTarget("/models/none", ["--api-key", "engine-side-secret"])
    with TestClient(create_app(settings, target, autostart=False), base_url=LOCAL) as test_client:
        yield test_client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def no_secret_in(text: str) -> bool:
    return not any(secret in text for secret in (ADMIN, INFER, METRICS, "engine-side-secret"))


def test_health_ready_status_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["state"] == "stopped"
    status = client.get("/status")
    assert status.status_code == 200
    body = status.json()
    assert body["state"] == "stopped" and body["engine"] is None
    assert body["plugin"]["active_version"] is None and body["plugin"]["bundled_version"]
    assert "--api-key" in body["command"] and no_secret_in(status.text)
    assert client.get("/docs").status_code == 200
    assert "/plugins/{version}/activate" in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize("method,path", [("post", "/start"), ("post", "/stop"), ("post", "/restart"),
                                         ("post", "/plugins/0.2.0/activate")])
def test_admin_calls_need_the_admin_key(client, method, path):
    for headers in ({}, bearer("wrong"), bearer(INFER), {"Authorization": ADMIN}):
        response = client.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (path, headers)
        assert "Authorization: Bearer" in response.json()["detail"] and no_secret_in(response.text)


def test_inference_keys_reach_only_v1(client):
    assert client.get("/v1/models").status_code == 401
    stopped = client.get("/v1/models", headers=bearer(INFER))
    assert stopped.status_code == 503 and stopped.headers["Retry-After"]
    assert "POST /start" in stopped.json()["error"]["message"]
    assert client.get("/v1/models", headers=bearer(ADMIN)).status_code == 503


def test_metrics_keyed_by_configuration(client):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer(INFER)).status_code == 401
    page = client.get("/metrics", headers=bearer(METRICS))
    assert page.status_code == 200
    # Engine series carry the model's name: without a models table, the engine's served name or its model path.
    assert 'caovan_engine_up{model="/models/none"} 0.0' in page.text
    assert 'caovan_engine_state{model="/models/none",state="stopped"} 1.0' in page.text
    assert "vllm:" not in page.text
    engine = client.get("/metrics/engine", headers=bearer(METRICS))
    assert engine.status_code == 503


def test_metrics_open_without_metrics_keys(tmp_path):
    settings = load_settings(state_dir=str(tmp_path))
    with TestClient(create_app(settings, EngineTarget("/models/none", []), autostart=False), base_url=LOCAL) as client:
        assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize("method,path,kwargs", [
    ("get", "/logs?tail=-1", {}),
    ("get", "/logs?tail=lots", {}),
    ("get", "/logs/stream?tail=-5", {}),
    ("get", "/doctor?refresh=perhaps", {}),
    ("post", "/restart", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("post", "/restart", {"json": {"reason": "x" * 500}}),
    ("post", "/stop", {"json": ["a", "list"]}),
    ("post", "/plugins/..%2F..%2Fetc/activate", {}),
    ("post", "/plugins/%2e%2e/activate", {}),
    ("post", "/plugins/9.9.9/activate", {}),
    ("post", "/plugins/" + "v" * 80 + "/activate", {}),
    ("delete", "/status", {}),
    ("get", "/no/such/page", {}),
])
def test_bad_input_is_4xx_never_5xx(client, method, path, kwargs):
    headers = {**bearer(ADMIN), **kwargs.pop("headers", {})}
    response = client.request(method, path, headers=headers, **kwargs)
    assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
    assert no_secret_in(response.text)


def test_unknown_plugin_version_is_404_with_advice(client):
    response = client.post("/plugins/9.9.9/activate", headers=bearer(ADMIN))
    assert response.status_code == 404 and "caovan plugins add" in response.json()["detail"]


def test_plugins_listing(client):
    body = client.get("/plugins").json()
    assert body["active_version"] is None and body["bundled"]["active"] and body["versions"] == []


def test_a_model_named_by_its_path_is_not_addressed_through_an_encoded_slash(client):
    """Without a models table the one model's name is its path; an encoded slash would read two ways behind the
    daemon, so the front door refuses it before routing, and /stop is that model's unload."""
    response = client.post("/models/%2Fmodels%2Fnone/unload", headers=bearer(ADMIN))
    assert response.status_code == 400 and "percent-encodes" in response.json()["detail"], response.text
    assert client.post("/stop", headers=bearer(ADMIN)).status_code == 202


def test_doctor_reruns_on_refresh_at_most_every_doctor_min_rerun_s(client, monkeypatch):
    """Any page can send the GET (an <img> needs no key), so refresh=1 cannot make the daemon run the doctor (seconds
    of CPU) on every request. The doctor itself is a stand-in here; test_main_flow runs the real one."""
    runs, now = [], [1000.0]

    async def counted(daemon):
        runs.append(now[0])
        return {"source": "stand-in", "checks": []}
    monkeypatch.setattr(doctor_api, "run_doctor", counted)
    monkeypatch.setattr(doctor_api, "time", types.SimpleNamespace(time=lambda: now[0]))  # this module's clock only
    assert client.get("/doctor").json()["cached"] is False
    now[0] += doctor_api.DOCTOR_MIN_RERUN_S - 1
    for _ in range(5):
        assert client.get("/doctor?refresh=1").json()["cached"] is True
    now[0] += 1
    assert client.get("/doctor?refresh=1").json()["cached"] is False
    assert client.get("/doctor").json()["cached"] is True
    assert runs == [1000.0, 1000.0 + doctor_api.DOCTOR_MIN_RERUN_S]
    # A doctor_cache_s shorter than the bound does not undo it.
    client.app.state.daemon.settings.doctor_cache_s = 0
    now[0] += doctor_api.DOCTOR_MIN_RERUN_S - 1
    assert client.get("/doctor").json()["cached"] is True
    assert len(runs) == 2
