"""`caovan plugins add WHEEL|DIR`, `caovan plugins list`, `caovan plugins activate VERSION`."""

from pathlib import Path
from typing import Optional

import typer

import caovan_kernels
from caovan_manager.errors import ConfigError, PluginStoreError
from caovan_manager.plugins.store import PluginStore
from caovan_manager.store import Store

from .app import app

plugins_app = typer.Typer(help="Installed plugin versions and verified swaps between them.", no_args_is_help=True)
app.add_typer(plugins_app, name="plugins")

ConfigOption = typer.Option(None, "--config", help="The daemon's settings file (.toml, .yaml).")


def _settings(config: Optional[Path]):
    # pydantic-settings takes a quarter of a second to import: only the commands that read settings pay it.
    from caovan_manager.config import load_settings

    try:
        return load_settings(config)
    except ConfigError as exc:
        typer.echo(f"caovan plugins: {exc}", err=True)
        raise typer.Exit(2) from None


@plugins_app.command("add")
def add(source: Path = typer.Argument(..., help="A wheel of the caovan distribution, or its project folder."),
        config: Optional[Path] = ConfigOption) -> None:
    """Install a plugin version into the store (it becomes active only through `activate`)."""
    settings = _settings(config)
    try:
        meta = PluginStore(settings.plugin_store_dir).add(source)
    except PluginStoreError as exc:
        typer.echo(f"caovan plugins add: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"added plugin version {meta['version']} to {settings.plugin_store_dir}; "
               f"activate it with `caovan plugins activate {meta['version']}`")


@plugins_app.command("list")
def list_versions(config: Optional[Path] = ConfigOption) -> None:
    """The versions in the store and the active one."""
    settings = _settings(config)
    active = Store(settings.database_path).active_version() if settings.database_path.exists() else None
    mark = "*" if active is None else " "
    typer.echo(f"{mark} bundled ({caovan_kernels.__version__})")
    for meta in PluginStore(settings.plugin_store_dir).versions():
        mark = "*" if meta["version"] == active else " "
        typer.echo(f"{mark} {meta['version']}    from {meta['source']}")


@plugins_app.command("activate")
def activate(version: str = typer.Argument(..., help="A version from `caovan plugins list`, or `bundled`."),
             url: Optional[str] = typer.Option(None, help="The daemon (default: its configured host and port)."),
             admin_key: Optional[str] = typer.Option(None, envvar="CAOVAN_ADMIN_KEY",
                                                     help="Admin key (default: the first configured one)."),
             wait: bool = typer.Option(True, help="Wait for the verification and print its outcome."),
             config: Optional[Path] = ConfigOption) -> None:
    """Ask the running daemon to swap to VERSION: drain, restart, verify, roll back if worse."""
    import time

    import httpx

    settings = _settings(config)
    base = url or f"http://{settings.host}:{settings.port}"
    key = admin_key or (settings.security.admin_keys[0].get_secret_value() if settings.security.admin_keys else None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        # A JSON body: the daemon takes state-changing calls only in forms no web page can send cross-site.
        response = httpx.post(f"{base}/plugins/{version}/activate", headers=headers, json={}, timeout=30)
    except httpx.HTTPError as exc:
        typer.echo(f"caovan plugins activate: the daemon at {base} did not answer ({type(exc).__name__}); is "
                   f"`caovan serve` running?", err=True)
        raise typer.Exit(1) from None
    body = response.json()
    message = body.get("message") or body.get("detail")
    if response.status_code >= 300:
        typer.echo(f"caovan plugins activate: {message}", err=True)
        raise typer.Exit(1)
    typer.echo(message)
    if not wait:
        return
    started = time.time()
    while True:
        time.sleep(2)
        history = httpx.get(f"{base}/plugins", timeout=30).json()
        if history["activation_in_progress"]:
            continue
        latest = next((item for item in history["history"] if item["at"] >= started - 1), None)
        if latest is None:
            continue
        typer.echo(f"{latest['outcome']}: {latest['reason']}")
        raise typer.Exit(0 if latest["outcome"] == "activated" else 1)
