"""The `caovan serve` and `caovan plugins` commands' argument handling (the daemon itself runs in integration)."""

from __future__ import annotations

import os
import socket
import zipfile

from typer.testing import CliRunner

import caovan_manager.cli.plugins  # noqa: F401  (registers the commands)
import caovan_manager.cli.serve  # noqa: F401
from caovan_manager.cli.app import app
from caovan_manager.cli.serve import split_model_and_args


def test_model_and_vllm_arguments_are_told_apart():
    assert split_model_and_args("/models/q", ["--max-model-len", "4096"]) == ("/models/q", ["--max-model-len", "4096"])
    assert split_model_and_args("--tensor-parallel-size", ["2"]) == (None, ["--tensor-parallel-size", "2"])
    assert split_model_and_args(None, []) == (None, [])


def test_serve_rejects_a_bad_config_before_starting_anything(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("port = 0\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert "port: Input should be greater than or equal to 1" in result.output


def test_serve_refuses_a_model_beside_a_models_table(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n[models.coder]\nmodel = "/m/coder"\n')
    result = CliRunner().invoke(app, ["serve", "/m/other", "--config", str(config)])
    assert result.exit_code == 2
    assert "MODEL (/m/other) and the config's models table were both given" in result.output


def test_serve_refuses_a_port_a_listener_holds_naming_it(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port)], env={"CAOVAN_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert f"the daemon's port 127.0.0.1:{port} is already in use by pid {os.getpid()}" in result.output
    assert "--port (or CAOVAN_PORT)" in result.output


def test_plugins_add_and_list(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    wheel = tmp_path / "caovan-0.9.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("caovan_kernels/__init__.py", "__version__ = '0.9.1'\n")
        whl.writestr("caovan-0.9.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: caovan\nVersion: 0.9.1\n")
        whl.writestr("caovan-0.9.1.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr("caovan-0.9.1.dist-info/RECORD", "")
    runner = CliRunner()
    added = runner.invoke(app, ["plugins", "add", str(wheel), "--config", str(config)])
    assert added.exit_code == 0 and "added plugin version 0.9.1" in added.output
    again = runner.invoke(app, ["plugins", "add", str(wheel), "--config", str(config)])
    assert again.exit_code == 1 and "already in the store" in again.output
    listing = runner.invoke(app, ["plugins", "list", "--config", str(config)])
    assert "* bundled" in listing.output and "  0.9.1" in listing.output


def test_plugins_activate_without_a_daemon_says_so(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'port = 1\nstate_dir = "{tmp_path}"\n')
    result = CliRunner().invoke(app, ["plugins", "activate", "0.9.1", "--config", str(config)])
    assert result.exit_code == 1 and "is `caovan serve` running?" in result.output
