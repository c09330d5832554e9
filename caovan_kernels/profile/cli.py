"""`caovan profile MODEL_DIR [--gpus ...] [--json] [-- pinned vllm args]`: print the launch profile."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from caovan_kernels.errors import LaunchProfileError

from .gpus import parse_inventory
from .launch_profile import LaunchProfile
from .planner import build_profile
from .stdout_guard import stdout_to_stderr
from .vllm_abilities import from_version_table

GPUS_HELP = ("GPUs to plan for instead of this machine's: `2x RTX 2080 Ti 22GB sm75`, groups separated by commas, "
             "`nvlink` for bridged cards, `cpu` for none, or a JSON file")


def render(profile: LaunchProfile, console: Console) -> None:
    table = Table(title=f"Caovan launch profile: {profile.model}", title_justify="left", show_lines=False)
    table.add_column("decision", style="bold")
    table.add_column("value", style="cyan")
    table.add_column("reason")
    for d in profile.decisions:
        table.add_row(d.name, d.value, d.reason)
    console.print(table)
    console.print(f"device: {profile.device}")
    console.print(f"vLLM:   {profile.vllm}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in profile.env.items())
    console.print("command:", (env + " " if env else "") + shlex.join(["caovan-vllm-serve", profile.model,
                                                                        *profile.args]), soft_wrap=True,
                  highlight=False, markup=False)


def profile_command(
    model_dir: Path = typer.Argument(..., help="Local model directory (with config.json)."),
    pinned: Optional[list[str]] = typer.Argument(None, help="vLLM arguments after `--`: pinned, they always win."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help=GPUS_HELP),
    vllm_version: Optional[str] = typer.Option(
        None, "--vllm-version", help="Plan for this vLLM version from Caovan's table instead of inspecting the "
                                     "installed one (for planning on a machine without vLLM)."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON (stdout holds only the JSON)."),
) -> None:
    """Print the launch profile (vLLM args, env and one reason per decision) for MODEL_DIR on these GPUs."""
    try:
        inventory = parse_inventory(gpus) if gpus is not None else None
        abilities = from_version_table(vllm_version, "--vllm-version") if vllm_version else None
        if as_json:
            with stdout_to_stderr():
                profile = build_profile(model_dir, pinned or [], inventory, abilities)
        else:
            profile = build_profile(model_dir, pinned or [], inventory, abilities)
    except LaunchProfileError as exc:
        typer.echo(f"caovan profile: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(profile.to_json())
    else:
        render(profile, Console(width=160))
