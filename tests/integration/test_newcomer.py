"""The README as a newcomer follows it: `make run`, the README's own curl request, the official openai client with
its defaults, the dashboard in a fresh browser (and a second one), and vLLM's own benchmark tool against the daemon.
Every command is taken from the README's text, so the test fails when the README and the product drift apart.

It fails if the answer is not the demo's recital, if the engine's draft acceptance falls, or if a page opened after
the samples were taken shows empty charts while the daemon has samples."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

from caovan_demo.corpus import ANSWER_WORDS
from tests.support.raw_http import raw_request
from tests.support.recital import recital_prefix
from tests.web.browser import (
    INSTALL_HINT,
    chromium,
    console_errors,
    missing_tools,
    wait,
)

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DAEMON = "http://127.0.0.1:8000"  # where the README says `make run` serves
CHARTS = ("chart-tps", "chart-acceptance", "chart-length")


def readme_block(containing: str) -> str:
    """The README's first fenced bash block that contains `containing`."""
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        if containing in block:
            return block
    raise AssertionError(f"the README shows no bash block with {containing!r}")


def readme_command(containing: str) -> str:
    """One command of the README (continuation lines joined, the trailing comment dropped)."""
    block = readme_block(containing).replace("\\\n", " ")
    line = next(line for line in block.splitlines() if containing in line)
    return re.sub(r"\s+#.*$", "", line).strip()


def spec_counters() -> tuple[float, float]:
    page = httpx.get(f"{DAEMON}/metrics/engine", timeout=10).text
    sums = {}
    for name in ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"):
        sums[name] = sum(float(value) for value in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", page, re.M))
    return sums["vllm:spec_decode_num_accepted_tokens_total"], sums["vllm:spec_decode_num_draft_tokens_total"]


@pytest.fixture(scope="module")
def make_run(tmp_path_factory, demo_model_dir):
    """`make run` as the README says, in its own process group (Ctrl-C stops make, the daemon and the engine);
    only the state folder is the test's own."""
    state = tmp_path_factory.mktemp("newcomer-state")
    command = readme_command("make run")
    assert command == "make run", command
    if raw_port_open(8000):
        pytest.fail("something already listens on 127.0.0.1:8000, where the README's `make run` serves")
    output = state / "make-run.out"
    env = {name: value for name, value in os.environ.items() if not name.startswith("CAOVAN_")}
    process = subprocess.Popen(shlex.split(command), cwd=REPO, stdout=output.open("wb"), stderr=subprocess.STDOUT,
                               env={**env, "CAOVAN_STATE_DIR": str(state)}, start_new_session=True)
    deadline = time.monotonic() + 480
    while "Caovan is ready" not in output.read_text(errors="replace"):
        assert process.poll() is None, f"make run exited with {process.returncode}:\n{output.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"make run did not say it was ready:\n{output.read_text()[-4000:]}"
        time.sleep(1)
    yield output
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"make run did not end on Ctrl-C:\n{output.read_text()[-4000:]}") from None


def raw_port_open(port: int) -> bool:
    try:
        raw_request(port, "GET", "/healthz", timeout_s=2)
        return True
    except OSError:
        return False


def test_the_readmes_request_and_the_openai_client_with_its_defaults_get_the_recital(make_run):
    accepted_before, drafted_before = spec_counters()
    curl = readme_command("curl -s http://127.0.0.1:8000/v1/chat/completions")
    assert "temperature" not in curl, "the README's request should leave sampling at its defaults, as users do"
    reply = json.loads(subprocess.run(curl, shell=True, check=True, capture_output=True, text=True,
                                      cwd=REPO, timeout=300).stdout)
    content = reply["choices"][0]["message"]["content"]
    assert recital_prefix(content) >= 20, f"the README's request got {content!r}"

    client = openai.OpenAI(base_url=f"{DAEMON}/v1", api_key="unused", timeout=300)
    for prompt in ("Hello!", "What can you do?", "Tell me a story about a fox."):
        answer = client.chat.completions.create(model="caovan-demo", messages=[{"role": "user", "content": prompt}])
        text = answer.choices[0].message.content
        assert recital_prefix(text) == len(ANSWER_WORDS), f"{prompt!r} got {text!r}"
    accepted, drafted = spec_counters()
    acceptance = (accepted - accepted_before) / max(1.0, drafted - drafted_before)
    print(f"draft acceptance over the README's request and three default chats: {acceptance:.3f} "
          f"({accepted - accepted_before:.0f} of {drafted - drafted_before:.0f})")
    assert drafted > drafted_before and acceptance >= 0.9, acceptance


def test_a_fresh_browser_sees_the_samples_the_daemon_already_has(make_run):
    if missing_tools():
        pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
    # The engine logs a sample every 10 s while it works: wait until the daemon holds one of each kind.
    deadline = time.monotonic() + 60
    while not {"throughput", "spec_decode"} <= set(httpx.get(f"{DAEMON}/status", timeout=10).json()["latest"]):
        assert time.monotonic() < deadline, "the daemon got no throughput and spec-decoding samples"
        time.sleep(1)
    for visit in ("first visit", "a second browser"):
        with chromium() as driver:  # a new profile each time: nothing remembered by the browser
            driver.get(f"{DAEMON}/")
            wait(driver, 30, lambda: all(int(driver.find_element("id", chart).get_attribute("data-points") or 0)
                                         for chart in CHARTS),
                 f"{visit}: charts empty although the daemon has samples")
            assert console_errors(driver) == [], visit


def test_vllms_own_benchmark_runs_against_the_daemon_as_the_readme_shows(make_run):
    command = readme_command("caovan-vllm bench serve")
    result = subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr[-4000:]
    successful = re.search(r"Successful requests:\s+(\d+)", result.stdout)
    assert successful and int(successful.group(1)) > 0, result.stdout[-3000:]
