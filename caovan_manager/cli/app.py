"""The `caovan` command group; each command lives in its own module beside this one."""

import typer

app = typer.Typer(
    name="caovan",
    help="Serve hybrid GDN models (Qwen3.6) on Turing GPUs through vLLM, and keep them running.",
    no_args_is_help=True,
    add_completion=False,
)
