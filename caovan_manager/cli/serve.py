"""`caovan serve [MODEL] [--config FILE] [--host H] [--port P] [-- extra vLLM args]`: the daemon and its engine."""

from pathlib import Path
from typing import Optional

import typer

from .app import app


def split_model_and_args(model: Optional[str], extra: list[str]) -> tuple[Optional[str], list[str]]:
    """`caovan serve -- --tensor-parallel-size 2` has no model: click hands the first word after `--` to MODEL, so an
    option there belongs to the vLLM arguments."""
    if model is not None and model.startswith("-"):
        return None, [model, *extra]
    return model, extra


@app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(None, help="Model directory or name (default: the embedded demo model)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (.toml, .yaml)."),
    host: Optional[str] = typer.Option(None, help="Address of the daemon (default 127.0.0.1, CAOVAN_HOST)."),
    port: Optional[int] = typer.Option(None, help="Port of the daemon and its OpenAI API (default 8000, CAOVAN_PORT)."),
) -> None:
    """Start the daemon: it runs vLLM as a supervised child (arguments after `--` go to vLLM unchanged), proxies
    the OpenAI API at /v1, and serves status, metrics, logs and the dashboard. Ctrl-C stops everything."""
    import logging

    import uvicorn

    # The daemon's modules (FastAPI, uvicorn, pydantic-settings: about a second) load only for this command, so
    # `caovan --help` and the other commands start at once.
    from caovan_manager.app import create_app
    from caovan_manager.config import load_settings
    from caovan_manager.daemon import build_embedded_model
    from caovan_manager.engine.launch import resolve_target
    from caovan_manager.engine.process import check_port_free
    from caovan_manager.errors import ConfigError, PortInUse

    try:
        settings = load_settings(config, host=host, port=port)
    except ConfigError as exc:
        typer.echo(f"caovan serve: {exc}", err=True)
        raise typer.Exit(2) from None
    model, extra = split_model_and_args(model, list(ctx.args))
    if model and settings.models:
        typer.echo(f"caovan serve: MODEL ({model}) and the config's models table were both given; add the model to "
                   f"the table, or leave out --config to serve it alone", err=True)
        raise typer.Exit(2)
    engine = settings.engine.model_copy(update={
        "model": model or settings.engine.model, "args": [*settings.engine.args, *extra]})
    settings = settings.model_copy(update={"engine": engine})
    try:
        check_port_free(settings.port, settings.host, what="the daemon's port", fix="choose another with --port "
                                                                                  "(or CAOVAN_PORT)")
    except PortInUse as exc:
        typer.echo(f"caovan serve: {exc}", err=True)
        raise typer.Exit(2) from None

    # The supervisor's state changes go to the console beside uvicorn's lines; the engine's output goes to its log
    # file (GET /logs, /logs/stream).
    logging.basicConfig(level=logging.INFO, format="%(levelname)-9s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per engine poll otherwise
    # One model: resolved here (building the demo model if none was given), so its name is in the first line.
    target = None if settings.models else resolve_target(
        settings, lambda: build_embedded_model(lambda msg: typer.echo(msg, err=True)))
    application = create_app(settings, target)
    base = f"http://{settings.host}:{settings.port}"

    def announce() -> None:
        typer.echo(f"Caovan is ready. Dashboard: {base}/   API: {base}/v1   Status: {base}/status   "
                   f"Docs: {base}/docs   (Ctrl-C stops the engine and the daemon)", err=True)

    application.state.daemon.ready_callbacks.append(announce)
    if target is None:
        typer.echo(f"caovan serve: daemon on {base}; models {', '.join(settings.models)} load on request (or at "
                   f"start where preload is set)", err=True)
    else:
        typer.echo(f"caovan serve: daemon on {base}; starting the engine on {target.model} "
                   f"(about a minute on a CPU, longer on first GPU start)", err=True)
    uvicorn.run(application, host=settings.host, port=settings.port, log_level="info", access_log=settings.access_log,
                timeout_graceful_shutdown=int(min(settings.supervisor.drain_timeout_s, 10)) or 1)
