from pathlib import Path
from typing import Optional

import typer

from .app import app


@app.command("demo-model")
def demo_model(
    directory: Optional[Path] = typer.Argument(None, help="Where to write it (default: the Caovan cache)."),
) -> None:
    """Build the embedded default's model (tiny Qwen3-Next + MTP head, trained here), or reuse a cached build."""
    from caovan_manager.demo import build

    try:
        out = build(directory, log=lambda msg: typer.echo(msg, err=True))
    except FileExistsError as exc:
        typer.echo(f"caovan demo-model: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(out))
