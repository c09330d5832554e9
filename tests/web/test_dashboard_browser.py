"""The dashboard in real headless Chromium against a daemon serving the real vLLM CPU engine: it loads cleanly, shows
the engine ready, its charts and log tail move with traffic sent by the official openai client, acceptance is shown,
a wrong admin key is refused and the right one restarts the engine while the page follows the states; the Models card
shows the one model and refuses a wrong key too."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest
from selenium.webdriver.common.by import By

from tests.integration.daemon.conftest import ADMIN_KEY, INFERENCE_KEY
from tests.integration.daemon.load import StreamingLoad

from .browser import (
    INSTALL_HINT,
    admin_confirm,
    admin_model,
    chromium,
    console_errors,
    missing_tools,
    model_row,
    model_view,
    text,
    wait,
)
from .conftest import PRIMARY

pytestmark = pytest.mark.engine

SAMPLE_WAIT_S = 90  # the engine logs its throughput and acceptance every 10 s while busy; CI's 2 cores are slow
RESTART_WAIT_S = 420


def newest_point(driver, chart_id: str) -> float:
    """The time (seconds since the epoch) of the newest sample a chart has drawn."""
    return float(driver.find_element(By.ID, chart_id).get_attribute("data-newest") or 0)


def admin_restart(driver, key: str) -> None:
    admin_confirm(driver, "#restart-button", "Restart the engine?", key)


def test_dashboard_follows_the_engine(observed, artifacts: Path) -> None:
    if missing_tools():
        pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
    daemon = observed.daemon
    with chromium() as driver:
        driver.get(f"{daemon.url}/")
        wait(driver, 30, lambda: text(driver, "state") == "ready", "the page never showed state ready")
        wait(driver, 30, lambda: int(driver.find_element(By.ID, "log").get_attribute("data-received") or 0) > 0,
             "the log tail stayed empty")
        # The page asks the daemon for /doctor, which runs the doctor in the engine's environment: it imports vLLM
        # and compiles its probes, 20-70 s on a 2-core machine running another test beside this one.
        wait(driver, 150, lambda: driver.find_elements(By.CSS_SELECTOR, "#doctor tr"), "no doctor report")
        time.sleep(1)  # let the first /metrics and /plugins answers land before the console is read
        assert console_errors(driver) == []
        assert text(driver, "connection") == "live"
        loaded = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        assert loaded and all(url.startswith(f"{daemon.url}/") for url in loaded), loaded  # nothing from elsewhere
        # The effective command: vLLM's server with the launch profile applied (from caovan-vllm-serve's decisions).
        command = driver.find_element(By.ID, "command").get_attribute("textContent")
        assert "vllm.entrypoints.openai.api_server" in command and "--speculative-config" in command, command
        assert "Plugin banner: v" in text(driver, "markers")
        assert "speculative MTP: n=3" in text(driver, "markers")
        assert "GDNCore kernels: not used" in text(driver, "markers")  # the CPU engine runs vLLM's own kernels
        # The CPU engine prints no TensorCore75 line yet; the dashboard says so rather than guessing.
        assert text(driver, "tc75-state") in ("not reported by this engine",) or \
            text(driver, "tc75-state").startswith("off")
        driver.save_screenshot(str(artifacts / "01-ready.png"))

        charts = ("chart-tps", "chart-acceptance", "chart-length")
        log_before = int(driver.find_element(By.ID, "log").get_attribute("data-received"))
        # The page also draws the daemon's last ten minutes as it connects: only samples taken after the load
        # started show that the charts follow the engine live.
        load_started = time.time()
        with StreamingLoad(daemon.url, INFERENCE_KEY, concurrency=2, max_tokens=48) as load:
            load.wait_for_ok(2, 120)
            wait(driver, SAMPLE_WAIT_S, lambda: all(newest_point(driver, c) > load_started for c in charts),
                 f"the charts drew no sample taken under traffic: {[newest_point(driver, c) for c in charts]}")
            wait(driver, SAMPLE_WAIT_S, lambda: int(driver.find_element(By.ID, "log").get_attribute(
                "data-received")) > log_before, "the log tail did not move under traffic")
        assert load.result.ok and not load.result.failed, load.result.summary("dashboard traffic", 0)
        assert "throughput" in driver.find_element(By.ID, "log").get_attribute("textContent")
        mtp = daemon.status()["engine"]["mtp_tokens"]
        positions = driver.find_elements(By.CSS_SELECTOR, "#positions .position")
        assert len(positions) == mtp == 3, text(driver, "positions")
        assert text(driver, "legend-acceptance").startswith("draft acceptance: ")
        assert text(driver, "legend-acceptance").endswith("%")
        assert "draft tokens accepted" in text(driver, "spec-totals")
        driver.save_screenshot(str(artifacts / "02-traffic.png"))

        admin_restart(driver, "not-the-admin-key")
        wait(driver, 10, lambda: "refused" in text(driver, "admin-result"), "the wrong key was not refused")
        assert driver.find_element(By.ID, "admin-result").get_attribute("data-ok") == "false"
        assert "401" in text(driver, "admin-result")
        # The browser reports the refused call itself as a failed resource load; nothing else may be in the console.
        errors = console_errors(driver)
        assert errors and all("/restart" in e and "401" in e for e in errors), errors
        time.sleep(1)
        assert text(driver, "state") == "ready" and daemon.status()["restarts"] == 0
        driver.save_screenshot(str(artifacts / "03-wrong-key.png"))

        run_before = daemon.status()["engine"]["run_id"]
        admin_restart(driver, ADMIN_KEY)
        wait(driver, 15, lambda: "accepted" in text(driver, "admin-result"), "the restart was not accepted")
        seen = ["ready"]

        def follow() -> bool:
            state = text(driver, "state")
            if state != seen[-1]:
                seen.append(state)
                if state == "starting":
                    driver.save_screenshot(str(artifacts / "04-restarting.png"))
            return len(seen) > 2 and state == "ready"

        wait(driver, RESTART_WAIT_S, follow, f"the page did not follow the restart back to ready; saw {seen}")
        assert "starting" in seen, seen
        status = daemon.status()
        assert status["engine"]["run_id"] > run_before and status["restarts"] == 1
        wait(driver, 15, lambda: "restart (requested)" in text(driver, "history"),
             "the restart history does not show the restart")
        wait(driver, 15, lambda: text(driver, "run").startswith(f"run {status['engine']['run_id']},")
             and text(driver, "state-detail").startswith("ready for"), "the engine card still shows the old run")
        assert "ready: " in text(driver, "history")
        assert console_errors(driver) == []
        driver.save_screenshot(str(artifacts / "05-ready-again.png"))

        driver.set_window_size(390, 1600)  # a phone's width: nothing may need sideways scrolling
        time.sleep(1)
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a phone's screen"
        driver.save_screenshot(str(artifacts / "06-phone.png"))
        assert httpx.get(f"{daemon.url}/readyz", timeout=10).status_code == 200


def test_models_card_shows_the_one_model(observed, artifacts: Path) -> None:
    """Without a models table the card has the one model's row; its Unload asks for the admin key like Restart does.
    The rows of several models and a swap from the card: tests/integration/daemon/test_models.py."""
    if missing_tools():
        pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
    daemon = observed.daemon
    daemon.wait_state("ready", RESTART_WAIT_S)  # also after a failure of the test above
    openai.OpenAI(base_url=f"{daemon.url}/v1", api_key=INFERENCE_KEY).completions.create(
        model=PRIMARY, prompt="one two", max_tokens=4)  # a last use to show, whatever ran before
    with chromium() as driver:
        driver.get(f"{daemon.url}/")
        wait(driver, 30, lambda: text(driver, "state") == "ready", "the page never showed state ready")
        wait(driver, 30, lambda: driver.find_elements(By.CSS_SELECTOR, "#models tr"), "the Models card stayed empty")
        wait(driver, 10, lambda: "One model" in text(driver, "models-mode"), "the card does not say it is one model")
        time.sleep(1)  # let the first /metrics, /models and /plugins answers land before the console is read
        assert console_errors(driver) == []
        rows = driver.find_elements(By.CSS_SELECTOR, "#models tr")
        assert [row.get_attribute("data-model") for row in rows] == [PRIMARY], text(driver, "models")
        cells = model_row(driver, PRIMARY)["cells"]
        assert cells[:3] == [PRIMARY, "all", "ready"] and cells[3].endswith(" ago"), cells
        assert cells[4:] == ["0", "0 queued, 0 in flight"], cells
        assert model_view(driver, PRIMARY) == {"state": "ready", "load": False, "unload": True}
        driver.save_screenshot(str(artifacts / "07-models.png"))

        admin_model(driver, PRIMARY, "unload", "not-the-admin-key")
        wait(driver, 10, lambda: f"Unloading {PRIMARY} refused" in text(driver, "admin-result"),
             "the wrong key was not refused for Unload")
        assert "401" in text(driver, "admin-result")
        errors = console_errors(driver)
        assert errors and all(f"/models/{PRIMARY}/unload" in e and "401" in e for e in errors), errors
        time.sleep(1)
        assert model_view(driver, PRIMARY)["state"] == "ready" and text(driver, "state") == "ready"
    assert httpx.get(f"{daemon.url}/readyz", timeout=10).status_code == 200
