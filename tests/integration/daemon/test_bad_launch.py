"""Bad launch arguments: the engine fails at start, the daemon retries with backoff, then reports `failed` with the
engine's own error, keeps answering, and refuses /v1 requests with that reason instead of letting them hang."""

from __future__ import annotations

import httpx
import pytest

from .conftest import ADMIN_KEY, INFERENCE_KEY, start_daemon, stop_daemon

pytestmark = pytest.mark.engine


def test_bad_vllm_argument_ends_in_failed_with_the_reason(demo_model_dir, private_dir):
    # A known flag with a value vLLM refuses (the launch profile drops unknown flags, but passes values through):
    # a key, which vLLM's error message repeats, so the daemon must mask what it derives from that output.
    daemon = start_daemon(private_dir, extra=["--max-num-seqs", f"banana-{ADMIN_KEY}"], max_restarts=1,
                          wait_ready=False)
    try:
        status = daemon.wait_state("failed", 400)
        print(f"SUMMARY bad launch arguments: load held n/a, faults survived 1 (state failed, daemon answering), "
              f"requests lost 0; reason: {status['reason'][:160]}")
        assert "--max-num-seqs" in status["reason"] and "banana-***" in status["reason"], status["reason"]
        assert "exited with code" in status["reason"]
        assert "gave up after 2 consecutive failures" in status["reason"]
        assert status["restarts"] == 1
        response = httpx.post(f"{daemon.url}/v1/completions", headers={"Authorization": f"Bearer {INFERENCE_KEY}"},
                              json={"model": "caovan-demo", "prompt": "x"}, timeout=30)
        assert response.status_code == 503 and "banana-***" in response.json()["error"]["message"]
        assert response.headers["Retry-After"]
        assert httpx.get(f"{daemon.url}/healthz").status_code == 200
        assert httpx.get(f"{daemon.url}/readyz").status_code == 503
        stored = b"".join(path.read_bytes() for path in private_dir.glob("caovan.sqlite3*"))
        shown = [httpx.get(f"{daemon.url}{path}", timeout=30).text for path in ("/status", "/logs?tail=2000")]
        for text in (*shown, stored.decode("latin-1"), daemon.output.read_text(errors="replace")):
            assert ADMIN_KEY not in text
    finally:
        leftovers = stop_daemon(daemon)
    assert not leftovers, leftovers
