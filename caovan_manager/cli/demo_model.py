from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .app import app


class Arch(str, Enum):
    qwen3_next = "qwen3_next"
    qwen3_5 = "qwen3_5"


@app.command("demo-model")
def demo_model(
    directory: Optional[Path] = typer.Argument(None, help="Where to write it (default: the Caovan cache)."),
    arch: Arch = typer.Option(Arch.qwen3_next, "--arch", help=(
        "qwen3_next: the embedded default (tiny Qwen3-Next + MTP). qwen3_5: Qwen3.6-27B's architecture "
        "(Qwen3_5ForConditionalGeneration) scaled down, same training.")),
    awq: bool = typer.Option(False, "--awq", help="Quantize it to AWQ int4 (AutoAWQ GEMM format, group size 128); "
                                                  "Qwen3.5 only, built from the cached bf16 model."),
) -> None:
    """Build a demo model (trained here, seeded, cached by content hash), or reuse a cached build; prints its path."""
    from caovan_demo import build  # torch and transformers: only when a model is built

    if awq and arch is not Arch.qwen3_5:
        typer.echo("caovan demo-model: --awq is built for the Qwen3.5 architecture; add --arch qwen3_5", err=True)
        raise typer.Exit(2)
    name = f"{arch.value}-awq" if awq else arch.value
    try:
        out = build(directory, log=lambda msg: typer.echo(msg, err=True), name=name)
    except FileExistsError as exc:
        typer.echo(f"caovan demo-model: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(out))
