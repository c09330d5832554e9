"""Secrets planted in the engine's arguments and in its output lines, fed through the real line handler of the
effects layer: every report it posts to the supervisor, and every line it keeps, is masked. (The same on the real
engine, through /status, /logs, SSE and SQLite: tests/integration/daemon/test_secrets.py.)"""

from __future__ import annotations

from pathlib import Path

from caovan_manager.broadcaster import Broadcaster
from caovan_manager.config import load_settings
from caovan_manager.engine.effects import EngineEffects, RunHandle
from caovan_manager.engine.launch import EngineTarget
from caovan_manager.logwatch.sink import LogSink
from caovan_manager.masking import Masker, mask_command, secret_option_values
from caovan_manager.metrics import DaemonMetrics
from caovan_manager.proxy.gate import Gate
from caovan_manager.store import Store
from caovan_manager.supervisor.messages import Exited, LogLine, ReadyProbe

ADMIN = "adm-planted-9d41"
ENGINE_KEY = "eng-planted-27c3"
DATA = Path(__file__).parents[1] / "logwatch" / "data"


def real_lines(name: str, *numbers: int) -> list[str]:
    lines = (DATA / name).read_bytes().decode().split("\n")  # numbered as grep -n numbers them
    return [lines[n - 1] for n in numbers]


def test_recognised_events_and_reports_carry_no_secret(tmp_path):
    settings = load_settings(state_dir=str(tmp_path), security={"admin_keys": [ADMIN]})
    target = EngineTarget("/models/demo", ["--api-key", ENGINE_KEY])
    masker = Masker(settings.secrets())
    masker.add_engine(target.args, {})
    posted = []
    sink = LogSink(tmp_path / "logs", 100_000, 1, 100, masker)
    effects = EngineEffects(settings, target, posted.append, sink, Gate(4, 1, 1), Store(tmp_path / "db.sqlite3"),
                            lambda version: None, DaemonMetrics(), Broadcaster(), masker, tmp_path)
    run = RunHandle(7, upstream=None)
    sink.open_run(7)
    # A real engine-config line and a real fatal line of vLLM's CPU build, each with a key where a path would be.
    config, fatal = real_lines("vllm_cpu_0.32_kv_too_small.log", 32, 111)
    for line in (config.replace("<demo-model>", f"/models/{ADMIN}/demo"), fatal.replace("despite its name", ENGINE_KEY),
                 f"caovan-vllm-serve decisions: {{\"profile\":true,\"decisions\":[],\"command\":[\"python\","
                 f"\"--api-key\",\"{ENGINE_KEY}\",\"/models/{ADMIN}\"]}}", f"Traceback: key {ADMIN} rejected"):
        effects._on_line(run, line)
    effects.post(Exited(7, 1, run.last_line))
    effects.post(ReadyProbe(7, ok=False, detail=f"smoke completion returned HTTP 401: bad key {ENGINE_KEY}"))

    kinds = [message.event.kind for message in posted if isinstance(message, LogLine)]
    assert kinds == ["engine_config", "fatal", "launch_decisions"], kinds
    for message in posted:
        assert ADMIN not in repr(message) and ENGINE_KEY not in repr(message), message
    assert "***" in posted[0].event.model and "***" in posted[1].event.message
    assert all(ADMIN not in r["line"] and ENGINE_KEY not in r["line"] for r in sink.tail(100))
    sink.close()
    text = (tmp_path / "logs" / "engine-00007.log").read_text()
    assert ADMIN not in text and ENGINE_KEY not in text and text.count("***") >= 4


def test_secret_option_values_in_both_spellings():
    assert secret_option_values(["--api-key", "a", "--hf-token=b", "--token", "", "--model", "m"]) == ["a", "b"]
    masker = Masker(["abcd"])
    masker.add(["abcdefgh", "xy"])
    assert masker.text("key abcdefgh and abcd, xy") == "key *** and ***, xy"  # the longer one hidden whole; a
    # two-letter "secret" is no secret: masking it everywhere would garble every line
    assert mask_command(["vllm", "--api-key", "xy", "--token=xy"], []) == ["vllm", "--api-key", "***", "--token=***"]
