"""The front door against CUDA vLLM with its developer routes on: the attacks of tests/support/door_attacks.py.

Run on a machine with CUDA vLLM and this project installed, from the repository root:
    python scripts/verify_front_door_gpu.py DEMO_MODEL_DIR
It starts `caovan serve` with a models table of one entry of the demo model with `sleep = true` (so the engine runs
with VLLM_SERVER_DEV_MODE=1 and serves /sleep, /collective_rpc, /server_info, ...), waits until it is ready, then
sends every spelling of every engine route through the daemon with an inference key, checks the engine's listeners
and that another local user cannot open its socket, and stops the daemon with Ctrl-C. Prints the counts and PASS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.proxy_bench import free_port, stop_daemon  # noqa: E402
from tests.support.door_attacks import (  # noqa: E402
    DEVELOPER_ROUTES,
    ENGINE_ROUTES,
    assert_engine_unreachable,
)

KEY = "front-door-gpu-inference-key"
GPU_ARGS = ["--gpu-memory-utilization", "0.3", "--max-model-len", "2048", "--additional-config",
            '{"gdn_prefill_backend": "triton"}']


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caovan-door-gpu-") as tmp:
        state = Path(tmp)
        port = free_port()
        (state / "caovan.toml").write_text(
            f'port = {port}\nstate_dir = "{state}"\n[security]\ninference_keys = ["{KEY}"]\n'
            f'[models.demo]\nmodel = "{args.model.resolve()}"\npreload = true\nsleep = true\n'
            f'args = {json.dumps(GPU_ARGS)}\n')  # a JSON list of strings is a TOML array
        daemon = subprocess.Popen([sys.executable, "-c", "from caovan_manager.cli import main; main()", "serve",
                                   "--config", str(state / "caovan.toml")], stdout=(state / "daemon.log").open("wb"),
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  env={k: v for k, v in os.environ.items() if not k.startswith("CAOVAN_")})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 540
            row: dict = {}
            while time.monotonic() < deadline and row.get("state") != "ready":
                assert daemon.poll() is None, (state / "daemon.log").read_text()[-3000:]
                time.sleep(2)
                try:
                    row = httpx.get(f"{url}/models", timeout=10).json()["models"][0]
                except httpx.HTTPError:
                    continue
            assert row.get("state") == "ready", row
            started = time.monotonic()
            outcomes = assert_engine_unreachable(port, row["pid"], row["address"][len("unix:"):],
                                                 ENGINE_ROUTES + DEVELOPER_ROUTES, KEY)
            row = httpx.get(f"{url}/models", timeout=10).json()["models"][0]
            assert row["state"] == "ready", row
            print(f"engine routes through the daemon ({len(ENGINE_ROUTES + DEVELOPER_ROUTES)} routes, every "
                  f"spelling, GET and POST), by status: {outcomes}; {time.monotonic() - started:.1f} s")
            print("engine API server: no TCP listener; no TCP listener of its group answers HTTP; vLLM's IPC "
                  "sockets in the private folder; another user (uid 65534) refused at the socket")
        finally:
            problem = stop_daemon(daemon)
        print(f"stopped: {problem or 'clean'}\nResult: PASS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
