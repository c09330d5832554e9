"""Configuration: sources and their order, validation messages, the engine's environment, masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from caovan_manager.config import engine_environment, load_settings
from caovan_manager.errors import ConfigError
from caovan_manager.masking import mask_command


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("CAOVAN_"):
            monkeypatch.delenv(name)


def test_defaults_bind_localhost_8000():
    settings = load_settings()
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)


def test_toml_file_then_environment_then_command_line(tmp_path, monkeypatch):
    config = tmp_path / "caovan.toml"
    config.write_text('port = 9001\n[engine]\nomp_num_threads = 3\nargs = ["--max-model-len", "4096"]\n'
                      '[supervisor]\nhang_timeout_s = 15\n')
    assert load_settings(config).port == 9001
    monkeypatch.setenv("CAOVAN_PORT", "9002")
    monkeypatch.setenv("CAOVAN_ENGINE__OMP_NUM_THREADS", "5")
    settings = load_settings(config)
    assert (settings.port, settings.engine.omp_num_threads, settings.supervisor.hang_timeout_s) == (9002, 5, 15)
    assert settings.engine.args == ["--max-model-len", "4096"]
    assert load_settings(config, port=9003).port == 9003


def test_the_old_engine_port_setting_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="engine.port is gone: the engine now listens on a private Unix socket"):
        load_settings(state_dir=str(tmp_path), engine={"port": 8001})


def test_yaml_file(tmp_path):
    config = tmp_path / "caovan.yaml"
    config.write_text("host: 0.0.0.0\nsecurity:\n  admin_keys: [s3cret-admin]\nengine:\n  cuda_visible_devices: '0, 1'\n")
    settings = load_settings(config)
    assert settings.host == "0.0.0.0" and settings.engine.cuda_visible_devices == "0,1"
    assert settings.secrets() == ["s3cret-admin"]
    assert "s3cret-admin" not in repr(settings)


def test_errors_name_the_field_the_variable_and_hide_keys(tmp_path, monkeypatch):
    config = tmp_path / "bad.toml"
    config.write_text('port = "eighty"\nprot = 1\n[security]\nadmin_keys = "not-a-list-s3cret"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert "bad.toml" in message
    assert "port: Input should be a valid integer" in message and "CAOVAN_PORT" in message
    assert "prot: unknown setting" in message
    assert "security.admin_keys" in message and "s3cret" not in message


def test_backoff_cap_below_initial_is_refused(monkeypatch):
    monkeypatch.setenv("CAOVAN_SUPERVISOR__BACKOFF_INITIAL_S", "30")
    monkeypatch.setenv("CAOVAN_SUPERVISOR__BACKOFF_MAX_S", "5")
    with pytest.raises(ConfigError, match="backoff_max_s must be at least backoff_initial_s"):
        load_settings()


def test_missing_or_unknown_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")
    other = tmp_path / "caovan.ini"
    other.write_text("x")
    with pytest.raises(ConfigError, match="use a .toml, .yaml or .yml file"):
        load_settings(other)


def test_unparsable_file(tmp_path):
    config = tmp_path / "broken.toml"
    config.write_text("port = [\n")
    with pytest.raises(ConfigError, match="broken.toml: cannot be read"):
        load_settings(config)


def test_bad_gpu_list():
    with pytest.raises(ConfigError, match="GPU indices"):
        load_settings(engine={"cuda_visible_devices": "first"})


def test_seed_variables_with_the_prefix_are_not_daemon_settings(monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "1")
    monkeypatch.setenv("CAOVAN_FLASHQLA_CHUNK", "64")
    load_settings()  # no "unknown setting" error


def test_engine_environment(tmp_path):
    settings = load_settings(engine={"cuda_visible_devices": "1,0", "omp_num_threads": 4, "cache_dir": str(tmp_path),
                                     "env": {"VLLM_LOGGING_LEVEL": "DEBUG"}},
                             security={"admin_keys": ["k-admin"]})
    base = {"PATH": "/bin", "CAOVAN_FLASHQLA_CHUNK": "64", "CAOVAN_FLASHQLA_MODE": "x", "CAOVAN_REQUIRE_TURBO3": "1",
            "CAOVAN_SECURITY__ADMIN_KEYS": '["k-admin"]', "CAOVAN_PORT": "8000", "TRITON_CACHE_DIR": "/mine"}
    env = engine_environment(settings, base)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "1,0"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "torchinductor-"))
    assert env["TRITON_CACHE_DIR"] == "/mine"  # the user's own choice stays
    assert env["TRITON_CACHE_AUTOTUNING"] == "1" and env["CAOVAN_CACHE_DIR"] == str(tmp_path)
    assert env["OMP_NUM_THREADS"] == "4" and env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["CAOVAN_REQUIRE_TURBO3"] == "1"
    assert not any(name.startswith("CAOVAN_FLASHQLA_") for name in env)
    assert "CAOVAN_SECURITY__ADMIN_KEYS" not in env and "CAOVAN_PORT" not in env


def test_masking_of_commands():
    command = ["python", "-m", "x", "--api-key", "abc", "--hf-token=hf_123", "--note", "k-admin-in-text"]
    assert mask_command(command, ["k-admin"]) == [
        "python", "-m", "x", "--api-key", "***", "--hf-token=***", "--note", "***-in-text"]


def test_seed_gpu_command_line_goes_through_unchanged(tmp_path):
    from caovan_manager.engine.launch import EngineTarget, build_launch

    seed = ["--tensor-parallel-size", "2", "--max-model-len", "262144", "--gpu-memory-utilization", "0.92",
            "--additional-config", '{"caovan":true,"caovan_mode":"auto","caovan_require_turbo3":true}']
    settings = load_settings(engine={"model": "/models/qwen3.6-27b-awq", "args": seed})
    target = EngineTarget(settings.engine.model, settings.engine.args)
    spec = build_launch(settings, target, Path("/run/caovan-x/run-7.sock"), tmp_path, Path("/store/0.2.0/site"))
    assert spec.command[1:4] == ["-m", "caovan_kernels.serve", "/models/qwen3.6-27b-awq"]
    assert spec.command[4:4 + len(seed)] == seed
    assert spec.command[-3:] == ["--uds", "/run/caovan-x/run-7.sock", "--disable-uvicorn-access-log"]
    assert spec.env["VLLM_RPC_BASE_PATH"] == "/run/caovan-x"  # vLLM's own IPC sockets beside it, private too
    assert spec.env["PYTHONPATH"].split(":")[0] == "/store/0.2.0/site"
    assert spec.cwd == tmp_path


def test_relative_model_directory_reaches_the_engine_as_an_absolute_path(tmp_path, monkeypatch):
    # The engine starts in its own run folder: `caovan serve ./my-model` must still find the model.
    from caovan_manager.engine.launch import resolve_target

    (tmp_path / "my-model").mkdir()
    monkeypatch.chdir(tmp_path)
    target = resolve_target(load_settings(engine={"model": "my-model"}))
    assert target.model == str(tmp_path / "my-model")
    assert resolve_target(load_settings(engine={"model": "Qwen/Qwen3.6-27B"})).model == "Qwen/Qwen3.6-27B"
