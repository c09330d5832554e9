"""OutputLock on the real engine: a real plugin build whose decode garbles its GDN state (the wrong state writes of
vllm#53051's kind) serves with /health 200 and answers every request, and the daemon's canary catches it; each
configured action happens. Skipped writes alone are not used here: they leave the state slots as allocated, which on
some machines reads as a zero state that this small demo decodes right (docs/verification.md).

GDNCore runs on the CPU engine only with caovan_mode=force (Triton's interpreter, slow), so the canary here asks two
of its built-in prompts for three tokens each: the runs of unrelated words, where the demo leans on its GDN state
(it decodes its familiar prompts right even from a wrong state). The broken build's first decode step is already
wrong (token 1 of each prompt); each token checked costs a prefill of its own through the interpreter."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import caovan_kernels
from caovan_manager.config import CANARY_PROMPTS
from caovan_manager.plugins.store import PluginStore
from caovan_manager.store import Store
from tests.caovan_manager.plugins.plugin_builds import build_wheel
from tests.web.browser import INSTALL_HINT, chromium, missing_tools, text, wait

from .conftest import INFERENCE_KEY, start_daemon, stop_daemon
from .test_plugins import wait_activation

pytestmark = pytest.mark.engine

BROKEN = f"{caovan_kernels.__version__}.post7"
FORCE = ["--additional-config", json.dumps({"caovan": True, "caovan_mode": "force"})]
STOCK = json.dumps({"caovan": True, "caovan_mode": "off"})
EXPOSING = [prompt for prompt in CANARY_PROMPTS if prompt.startswith(("from forest", "from music"))]
CANARY = """
[canary]
prompts = {prompts}
max_tokens = 3
interval_s = 0
timeout_s = 600
action = "{action}"
fallback_args = ["--additional-config", '{stock}']
"""


@pytest.fixture(scope="module")
def broken_wheel() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="caovan-broken-build-") as workdir:
        yield build_wheel(Path(workdir), BROKEN, corrupt_state=True)


def daemon_on_the_broken_build(state: Path, wheel: Path, action: str):
    """A daemon whose active plugin version is the broken build, its canary configured with `action`."""
    assert len(EXPOSING) == 2
    PluginStore(state / "plugins").add(wheel)
    store = Store(state / "caovan.sqlite3")
    store.save_active_version(BROKEN)
    store.close()
    return start_daemon(state, extra=FORCE, wait_ready=False, max_restarts=1,
                        config_extra=CANARY.format(prompts=json.dumps(EXPOSING), action=action, stock=STOCK))


def engine_health(status: dict) -> int:
    """The engine's own /health, over its Unix socket (it listens on no TCP port)."""
    socket_path = status["engine"]["address"].removeprefix("unix:")
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://engine") as client:
        return client.get("/health", timeout=10).status_code


def metric(daemon, name: str, model: str) -> float:
    text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
    line = next(line for line in text.splitlines() if line.startswith(f'{name}{{model="{model}"}}'))
    return float(line.rsplit(" ", 1)[1])


def test_alert_serves_the_broken_build_marked_degraded_while_health_stays_200(broken_wheel, private_dir):
    daemon = daemon_on_the_broken_build(private_dir, broken_wheel, "alert")
    try:
        status = daemon.wait_state("ready", 480)
        model = status["models"][0]["name"]
        canary = status["canary"]
        assert status["plugin"]["running_version"] == BROKEN
        assert canary["last"]["result"] == "failed" and canary["last"]["purpose"] == "start", canary["last"]["detail"]
        evidence = canary["degraded"]["evidence"]
        assert any(p.startswith(evidence["prompt"].removesuffix("...")) for p in EXPOSING), evidence
        assert evidence["got"] != evidence["expected"] and evidence["expected_text"], evidence
        assert "degraded" in status["reason"]
        # Healthy by every other measure: the engine's /health, a completion through the daemon.
        assert engine_health(status) == 200
        answer = httpx.post(f"{daemon.url}/v1/completions", headers={"Authorization": f"Bearer {INFERENCE_KEY}"},
                            json={"model": model, "prompt": EXPOSING[0], "max_tokens": 3, "temperature": 0},
                            timeout=300)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3
        assert metric(daemon, "caovan_canary_degraded", model) == 1
        assert metric(daemon, "caovan_canary_failures_total", model) == 1
        logs = httpx.get(f"{daemon.url}/logs", params={"tail": 2000}, timeout=10).json()["lines"]
        assert any(line["line"].startswith("caovan: canary (start) failed") for line in logs)
        # The dashboard says so, with the evidence.
        if missing_tools():
            pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
        with chromium() as driver:
            driver.get(f"{daemon.url}/")
            wait(driver, 30, lambda: text(driver, "canary").startswith("DEGRADED: canary failed (start"),
                 "the page did not show the engine degraded")
            assert f"of \"{evidence['prompt']}\"" in text(driver, "canary")

        refused = httpx.post(f"{daemon.url}/models/{model}/canary", headers={"Authorization": "Bearer not-the-key"},
                             timeout=30)
        assert refused.status_code == 401  # admin only
        asked = httpx.post(f"{daemon.url}/models/{model}/canary", headers=daemon.admin(), timeout=300)
        assert asked.status_code == 200, asked.text
        assert asked.json()["verdict"]["result"] == "failed" and asked.json()["degraded"]
        assert asked.json()["verdict"]["purpose"] == "on_demand"
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers


# Three engine starts, each checked by a canary whose GDN kernels run in Triton's interpreter: close to the suite's
# per-test limit on an idle 2-core machine, past it when another test shares the machine.
@pytest.mark.timeout(1500)
def test_an_activation_of_the_broken_build_is_rolled_back_by_its_canary(broken_wheel, private_dir):
    PluginStore(private_dir / "plugins").add(broken_wheel)
    daemon = start_daemon(private_dir, extra=FORCE, max_restarts=1,
                          config_extra=CANARY.format(prompts=json.dumps(EXPOSING), action="alert", stock=STOCK))
    try:
        status = daemon.status()
        assert status["canary"]["last"]["result"] == "passed" and status["plugin"]["active_version"] is None
        started = time.time()
        assert httpx.post(f"{daemon.url}/plugins/{BROKEN}/activate", headers=daemon.admin()).status_code == 202
        outcome = wait_activation(daemon, started, timeout_s=1200)
        assert outcome["outcome"] == "rolled_back" and "the canary failed" in outcome["reason"], outcome
        status = daemon.wait_state("ready", 480)
        assert status["plugin"]["running_version"] == status["plugin"]["bundled_version"]
        assert status["plugin"]["active_version"] is None
        assert status["canary"]["last"]["result"] == "passed" and status["canary"]["degraded"] is None
        assert status["canary"]["runs"] == 3  # the bundled start, the broken build, the bundled again
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers


def test_fallback_restarts_the_broken_build_with_the_safer_arguments(broken_wheel, private_dir):
    daemon = daemon_on_the_broken_build(private_dir, broken_wheel, "fallback")
    try:
        status = daemon.wait_state("ready", 600)
        assert status["restarts"] == 1 and status["recent_restarts"][0]["cause"] == "canary"
        assert "fallback" in status["recent_restarts"][0]["reason"]
        canary = status["canary"]
        assert canary["last"]["result"] == "passed" and canary["degraded"] is None and canary["runs"] == 2, canary
        assert canary["fallback_args"] == ["--additional-config", STOCK]
        command = status["launch"]["daemon_command"]  # the fallback's arguments after the engine's own: they win
        last = len(command) - 1 - command[::-1].index("--additional-config")
        assert command[last + 1] == STOCK and FORCE[1] in command
        assert any("caovan_mode=off" in (row["text"] or "") for row in status["marker_list"]), status["marker_list"]
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers
