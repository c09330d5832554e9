"""The models table through the daemon's HTTP surface, engines not started: routing by name and alias, the
OpenAI-style 404 and 400, /v1/models, /models, /status's rows, the admin key, and the model label of the metrics."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from caovan_manager.app import create_app
from caovan_manager.config import load_settings
from caovan_manager.errors import ConfigError
from tests.caovan_manager.api import LOCAL

ADMIN = "adm-models-secret"
MODELS = {
    "coder": {"model": "/models/none-coder", "gpus": [0], "aliases": ["code"], "ttl_s": 300},
    "chat": {"model": "/models/none-chat", "gpus": [0, 1], "args": ["--api-key", "engine-key-3391"]},
    "embed": {"model": "/models/none-embed", "gpus": [1]},
}


@pytest.fixture
def client(tmp_path):
    settings = load_settings(state_dir=str(tmp_path), models=MODELS, security={"admin_keys": [ADMIN]})
    with TestClient(create_app(settings, autostart=False), base_url=LOCAL) as test_client:
        yield test_client


def test_v1_models_lists_every_configured_model_with_its_state(client):
    listing = client.get("/v1/models").json()
    assert [(m["id"], m["state"], m["aliases"], m["gpus"]) for m in listing["data"]] == [
        ("coder", "stopped", ["code"], [0]), ("chat", "stopped", [], [0, 1]), ("embed", "stopped", [], [1])]
    assert all(m["object"] == "model" for m in listing["data"]) and listing["object"] == "list"


def test_one_model_is_looked_up_without_loading_it(client):
    card = client.get("/v1/models/code")  # by alias
    assert card.status_code == 200 and card.json()["id"] == "coder" and card.json()["state"] == "stopped"
    assert client.get("/models").json()["models"][0]["proxy"]["queued"] == 0
    empty = client.post("/v1/completions", json={"model": "", "prompt": "x"})
    assert empty.status_code == 404 and "the model the request names is not served here" in empty.json()["error"][
        "message"]


def test_a_restart_of_the_stopped_primary_is_a_load_placement_decides(client):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    restarted = client.post("/restart", headers=admin)
    assert restarted.status_code == 202 and restarted.json()["message"] == "loading coder", restarted.json()
    again = client.post("/models/coder/load", headers=admin)
    assert again.status_code == 202 and again.json()["message"].startswith("coder is loading")


def test_an_unknown_model_gets_an_openai_style_404_naming_the_configured_ones(client):
    response = client.post("/v1/chat/completions", json={"model": "gpt-4", "messages": []})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "NotFoundError" and error["param"] == "model" and error["code"] == 404
    # The configured names, never the requested one: error bodies carry no text the request controls.
    assert "gpt-4" not in error["message"] and "coder, chat, embed" in error["message"]
    assert client.get("/v1/models/nope").status_code == 404


def test_a_body_without_readable_json_or_with_a_non_string_model_gets_a_400(client):
    bad = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    wrong = client.post("/v1/completions", json={"model": 7, "prompt": "x"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "model"


def test_status_and_models_show_every_model_and_hide_engine_keys(client):
    status = client.get("/status")
    assert [row["name"] for row in status.json()["models"]] == ["coder", "chat", "embed"]
    assert "engine-key-3391" not in status.text
    models = client.get("/models").json()
    assert models["routed"] is True and models["fairness_s"] == 60
    coder = models["models"][0]
    assert coder["gpus"] == [0] and coder["ttl_s"] == 300 and coder["state"] == "stopped" and coder["swaps"] == 0
    assert coder["proxy"]["gate"] == "idle"  # stopped, loads on demand


def test_load_and_unload_need_the_admin_key_and_a_known_model(client):
    assert client.post("/models/coder/load", json={}).status_code == 401
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert client.post("/models/nope/load", headers=admin).status_code == 404
    unloaded = client.post("/models/code/unload", headers=admin)  # by alias
    assert unloaded.status_code == 202 and unloaded.json()["message"] == "coder is not loaded"


def test_engine_series_carry_the_model_name(client):
    page = client.get("/metrics").text
    for name in ("coder", "chat", "embed"):
        assert f'caovan_engine_up{{model="{name}"}} 0.0' in page
        assert f'caovan_model_swaps_total{{model="{name}"}} 0.0' in page


def test_the_models_table_is_checked_at_start(tmp_path):
    with pytest.raises(ConfigError, match="already used by models.coder"):
        load_settings(state_dir=str(tmp_path), models={"coder": {"aliases": ["x"]}, "x": {}})
    with pytest.raises(ConfigError, match="served-model-name is set by the daemon"):
        load_settings(state_dir=str(tmp_path), models={"a": {"args": ["--served-model-name", "b"]}})
    with pytest.raises(ConfigError, match="engine.model and a models table"):
        load_settings(state_dir=str(tmp_path), engine={"model": "/m"}, models={"a": {}})
    with pytest.raises(ConfigError, match="a model name uses letters"):
        load_settings(state_dir=str(tmp_path), models={"bad name": {}})


def test_a_canary_on_request_needs_the_admin_key_a_known_model_and_a_ready_engine(client):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert client.post("/models/code/canary", headers={"Authorization": "Bearer wrong"}).status_code == 401
    unknown = client.post("/models/nobody/canary", headers=admin)
    assert unknown.status_code == 404
    stopped = client.post("/models/code/canary", headers=admin)  # by alias; its engine is not running
    assert stopped.status_code == 409
    assert stopped.json() == {"accepted": False, "message": "a canary needs a ready engine; the engine is stopped",
                              "state": "stopped"}
    rows = client.get("/models").json()["models"]
    assert rows[0]["canary"] == {"enabled": True, "action": "alert", "interval_s": 900.0, "running": None, "runs": 0,
                                 "last": None, "degraded": None, "fallback_args": None}


def test_the_body_is_read_for_its_model_whatever_the_case_of_its_media_type(client):
    """Media types are case-insensitive, and vLLM reads `Application/JSON` as JSON: routing must too, or a request
    naming one model would go to the first entry's engine."""
    for content_type in ("Application/JSON", "application/json; charset=UTF-8", "APPLICATION/JSON"):
        response = client.post("/v1/completions", content=b'{"model": "gpt-4", "prompt": "x"}',
                               headers={"content-type": content_type})
        assert response.status_code == 404, content_type
        assert "coder, chat, embed" in response.json()["error"]["message"]


def test_without_a_models_table_one_model_is_looked_up_by_the_daemon(tmp_path):
    """vLLM serves the model list but no single model's card (GET /v1/models/{model} is a bare 404 there), so the
    daemon answers it, as it does with a models table."""
    named = load_settings(state_dir=str(tmp_path), engine={"model": "/models/none-single",
                                                           "args": ["--served-model-name", "solo", "duo"]})
    with TestClient(create_app(named, autostart=False), base_url=LOCAL) as single:
        card = single.get("/v1/models/solo")
        assert card.status_code == 200 and card.json()["id"] == "solo" and card.json()["object"] == "model"
        assert single.get("/v1/models/duo").json()["id"] == "solo"  # vLLM serves every name it is given
        missing = single.get("/v1/models/gpt-4")
        assert missing.status_code == 404 and "gpt-4" not in missing.text and "solo" in missing.text
