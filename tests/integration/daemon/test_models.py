"""Several models on the real CPU engine: one daemon, three entries of the demo model. `a` and `b` share GPU 0
(they take turns; `a` has an idle ttl), `c` has GPU 1 to itself (it runs beside them). On a CPU the GPU lists only
steer placement, which is what these tests are about. `a` and `c` are preloaded: their starts overlap. `b` asks for
vLLM's sleep mode, which the CPU build lacks: its swaps stop it, and say so.

The tests run in order on the one daemon, each from where the last left it (engine starts are what costs here)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest
from selenium.webdriver.common.by import By

from tests.support.door_attacks import DEVELOPER_ROUTES, assert_engine_unreachable
from tests.web.browser import (
    INSTALL_HINT,
    admin_model,
    chromium,
    console_errors,
    missing_tools,
    model_row,
    model_view,
    text,
    wait,
)

from .conftest import (
    ADMIN_KEY,
    INFERENCE_KEY,
    REPO,
    engine_group_members,
    start_daemon,
    stop_daemon,
)
from .load import StreamingLoad

pytestmark = pytest.mark.engine

TTL_S = 20
# The CPU engine binds its compute threads to cores as a GPU engine has its GPUs: a and b to core 0, c to core 1, so
# engines that run side by side do not spin on one core.
MODELS = f"""
[swap]
fairness_s = 600
[models.a]
gpus = [0]
preload = true
ttl_s = {TTL_S}
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0" }}
[models.b]
gpus = [0]
aliases = ["bee"]
sleep = true
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0" }}
[models.c]
gpus = [1]
preload = true
env = {{ VLLM_CPU_OMP_THREADS_BIND = "1" }}
"""


@pytest.fixture(scope="module")
def fleet(demo_model_dir):
    state = Path(tempfile.mkdtemp(prefix="caovan-models-test-"))
    running = start_daemon(state, config_extra=MODELS, wait_ready=False)
    try:
        wait_model(running, "a", "ready", 480)  # c loads beside it; the first test needs a at once (a's ttl runs)
    except BaseException:
        stop_daemon(running)
        raise
    yield running
    leftovers = stop_daemon(running)
    shutil.rmtree(state, ignore_errors=True)
    assert not leftovers, f"the daemon left engine processes behind: {leftovers}"


@pytest.fixture
def artifacts() -> Path:
    """Screenshots of the Models card go to test-artifacts/models/ (git-ignored), kept after the run."""
    folder = REPO / "test-artifacts" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def models(daemon) -> dict[str, dict]:
    rows = httpx.get(f"{daemon.url}/models", timeout=10).json()["models"]
    for row in rows:
        if row["pid"]:
            daemon.engine_groups.add(row["pid"])
    return {row["name"]: row for row in rows}


def wait_model(daemon, name: str, state: str, timeout_s: float, run_after: int | None = None) -> dict:
    deadline = time.monotonic() + timeout_s
    row: dict = {}
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            raise AssertionError(f"the daemon exited with {daemon.process.returncode}:\n{daemon.tail()}")
        row = models(daemon)[name]
        if row["state"] == state and (run_after is None or (row["run_id"] or 0) > run_after):
            return row
        time.sleep(0.5)
    raise AssertionError(f"model {name} not {state} in {timeout_s} s: {row}\n{daemon.tail()}")


def wait_queued(daemon, name: str, count: int, holding: dict[str, str], timeout_s: float = 60) -> None:
    """Wait until `count` requests for `name` are queued at the daemon; the models in `holding` must keep their
    states all the while (the load's first requests take a moment to arrive when two engines share the CPU)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = models(daemon)
        for held, state in holding.items():
            assert rows[held]["state"] == state, f"{held} left {state} while {name}'s requests queued: {rows[held]}"
        if rows[name]["proxy"]["queued"] == count:
            return
        assert time.monotonic() < deadline, f"{count} requests for {name} not queued in {timeout_s} s: {rows[name]}"
        time.sleep(0.2)


def assert_all_served(load: StreamingLoad, name: str) -> None:
    result = load.result
    print(result.summary(name, faults=0))
    assert result.outcomes and not result.failed and result.unfinished == 0, [o.error for o in result.failed][:5]


def test_interleaved_streams_for_two_models_on_one_gpu_swap_twice_and_lose_nothing(fleet):
    listed = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key=INFERENCE_KEY).models.list().data
    assert [m.id for m in listed] == ["a", "b", "c"]
    assert [m.state for m in listed][:2] == ["ready", "stopped"] and listed[2].state in ("starting", "checking", "ready")
    with StreamingLoad(fleet.url, INFERENCE_KEY, concurrency=2, max_tokens=48, model="a") as load_a:
        load_a.wait_for_ok(2, 180)
        with StreamingLoad(fleet.url, INFERENCE_KEY, concurrency=2, model="bee") as load_b:
            # a's requests keep coming: b waits (fairness_s is 600), its requests queued at the daemon
            wait_queued(fleet, "b", 2, holding={"a": "ready", "b": "stopped"})
            a_stopped = time.time()
            load_a.stop()
            load_b.wait_for_ok(4, 480)
            b_first = min(o.ended for o in load_b.result.ok)
            # b runs with vLLM's developer routes on (VLLM_SERVER_DEV_MODE=1, which sleep mode needs): none of them
            # may be reached through the daemon, nor by another local user (the front door; here, where b runs).
            b = models(fleet)["b"]
            outcomes = assert_engine_unreachable(fleet.port, b["pid"], b["address"][len("unix:"):], DEVELOPER_ROUTES,
                                                 INFERENCE_KEY)
            print(f"b's developer routes through the daemon, by status: {outcomes}")
            with StreamingLoad(fleet.url, INFERENCE_KEY, concurrency=2, model="a") as load_a2:
                wait_queued(fleet, "a", 2, holding={"b": "ready", "a": "stopped"})
                load_b.stop()
                load_a2.wait_for_ok(4, 480)
    for load, name in ((load_a, "a before the swap"), (load_b, "b"), (load_a2, "a after the swap back")):
        assert_all_served(load, name)
    # The swap waited for a's running streams: each one of them ended, in full, before b served anything.
    assert max(o.ended for o in load_a.result.outcomes) < b_first
    assert all(o.started < a_stopped + 1 for o in load_a.result.outcomes)
    rows = models(fleet)
    assert (rows["a"]["swaps"], rows["b"]["swaps"], rows["c"]["swaps"]) == (1, 1, 0)
    assert rows["a"]["state"] == "ready" and rows["b"]["state"] == "stopped"
    assert "stopped instead of put to sleep: this engine runs without --enable-sleep-mode" in rows["b"]["reason"]
    assert rows["c"]["state"] == "ready" and rows["c"]["run_id"] < rows["a"]["run_id"]  # beside them, untouched
    page = httpx.get(f"{fleet.url}/metrics").text
    assert 'caovan_model_swaps_total{model="a"} 1.0' in page and 'caovan_model_swaps_total{model="b"} 1.0' in page


def test_kill_9_of_one_engine_leaves_the_model_on_other_gpus_serving(fleet):
    a = wait_model(fleet, "a", "ready", 60)
    swaps = {name: row["swaps"] for name, row in models(fleet).items()}
    wait_model(fleet, "c", "ready", 300)
    # Light loads (a pause between requests) so the two engines and the load share the 2-core machine.
    with StreamingLoad(fleet.url, INFERENCE_KEY, concurrency=1, model="c", pause_s=0.5) as load_c:
        load_c.wait_for_ok(2, 120)
        assert models(fleet)["a"]["state"] == "ready"
        os.kill(a["pid"], signal.SIGKILL)
        killed = time.time()
        # The supervisor ends the killed engine's group (SIGTERM, the grace, SIGKILL), then starts a new run of a.
        deadline = time.monotonic() + 120
        while (models(fleet)["a"]["run_id"] or 0) <= a["run_id"]:
            assert time.monotonic() < deadline, f"no new run of a after the kill: {models(fleet)['a']}"
            time.sleep(0.5)
        load_c.wait_for_ok(len(load_c.result.ok) + 5, 120)
    assert_all_served(load_c, "c while a was killed")
    assert len([o for o in load_c.result.ok if o.started > killed]) >= 5
    assert not engine_group_members({a["pid"]}), "processes of the killed engine's group are left"
    rows = models(fleet)
    # a kill and the restart after it are no swap
    assert (rows["a"]["swaps"], rows["c"]["swaps"]) == (swaps["a"], swaps["c"]) and rows["c"]["state"] == "ready"
    reply = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key=INFERENCE_KEY).completions.create(
        model="c", prompt="one two", max_tokens=4)
    assert reply.model == "c" and reply.choices[0].text
    # a restarts on its own (the supervisor's backoff, tested in test_faults); the daemon's stop at the end of this
    # module ends it wherever its start is, and checks that nothing is left.


def test_the_models_card_shows_every_model_and_unloads_one(fleet, artifacts):
    if missing_tools():
        pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
    with chromium() as driver:
        driver.get(f"{fleet.url}/")
        wait(driver, 30, lambda: len(driver.find_elements(By.CSS_SELECTOR, "#models tr")) == 3,
             "the Models card does not list the three models")
        wait(driver, 10, lambda: "take turns" in text(driver, "models-mode"), "the card does not explain the turns")
        cells = model_row(driver, "b")["cells"]
        assert cells[:3] == ["b (bee)", "0", "stopped"] and cells[4] == str(models(fleet)["b"]["swaps"]), cells
        assert model_view(driver, "b") == {"state": "stopped", "load": True, "unload": False}
        assert model_row(driver, "c")["cells"][1:3] == ["1", "ready"]
        assert model_view(driver, "c") == {"state": "ready", "load": False, "unload": True}
        driver.save_screenshot(str(artifacts / "models-card.png"))

        admin_model(driver, "c", "unload", ADMIN_KEY)
        wait(driver, 15, lambda: "Unloading c accepted" in text(driver, "admin-result"), "Unload was not accepted")
        wait(driver, 120, lambda: model_view(driver, "c") == {"state": "stopped", "load": True, "unload": False},
             f"the card did not show c stopped: {text(driver, 'models')}")
        assert console_errors(driver) == []
        driver.save_screenshot(str(artifacts / "models-unloaded.png"))
    row = models(fleet)["c"]
    assert row["state"] == "stopped" and "unload requested" in row["reason"], row


def test_an_idle_model_is_unloaded_after_its_ttl(fleet):
    ready = wait_model(fleet, "a", "ready", 420)  # its new run, after the kill above
    started = time.monotonic()
    row = wait_model(fleet, "a", "stopped", TTL_S + 120)
    assert f"ttl_s = {TTL_S}" in row["reason"] and row["run_id"] == ready["run_id"], row
    idle = int(re.search(r"unloaded after (\d+) s without requests", row["reason"]).group(1))
    assert TTL_S <= idle <= TTL_S + 15, row["reason"]  # not before its ttl, nor long after
    assert time.monotonic() - started <= TTL_S + 30
    assert models(fleet)["b"]["state"] == "stopped"  # no ttl, and not loaded: nothing to unload
