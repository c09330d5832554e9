"""`caovan doctor` / `caovan-sm75-doctor`: check this machine for Caovan; `--json` for machines, exit code 1 on FAIL.

With --json stdout holds only the report (everything vLLM, Triton or torch print goes to stderr), so the daemon can
run it as a subprocess in the engine's environment and parse it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from caovan_kernels.profile.stdout_guard import stdout_to_stderr

from .report import CheckStatus, Report
from .runner import CHECKS, run_doctor

STYLE = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "bold red",
         CheckStatus.SKIP: "dim"}


def render(report: Report, console: Console) -> None:
    table = Table(title=f"Caovan doctor (caovan {report.caovan_version})", title_justify="left")
    for column in ("status", "check", "found", "fix"):
        table.add_column(column)
    for c in report.checks:
        table.add_row(f"[{STYLE[c.status]}]{c.status.value}[/]", c.name, c.detail, c.fix)
    console.print(table)
    console.print(" ".join(f"{k}: {v}" for k, v in report.summary().items()))


def doctor_command(
    model: Optional[Path] = typer.Option(None, "--model", help="Also show AutoSpec and AutoMem for this model "
                                                               "directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (stdout holds only the JSON)."),
    only: Optional[list[str]] = typer.Option(None, "--only", help=f"Run only these checks: {', '.join(CHECKS)}."),
) -> None:
    """Check Python, torch, GPUs, Triton, ptxas, vLLM, the GDN seams and kernels, caches and the plugin copy."""
    try:
        if as_json:
            with stdout_to_stderr():
                report = run_doctor(model, only)
        else:
            report = run_doctor(model, only)
    except ValueError as exc:
        typer.echo(f"caovan doctor: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(report.to_json())
    else:
        render(report, Console(width=200))
    raise typer.Exit(report.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Console script `caovan-sm75-doctor`."""
    app = typer.Typer(add_completion=False)
    app.command()(doctor_command)
    app(args=argv, prog_name="caovan-sm75-doctor")
