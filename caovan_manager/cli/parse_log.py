import json
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

import typer

from caovan_manager.logwatch import parse_lines

from .app import app


def _decoded_lines(stream: BinaryIO) -> Iterator[str]:
    # Binary iteration splits on "\n" only, so line numbers match `grep -n` even where progress bars wrote "\r";
    # undecodable bytes are replaced, not fatal: a log is read as far as it goes.
    for raw in stream:
        yield raw.decode("utf-8", errors="replace")


@app.command("parse-log")
def parse_log(
    file: str = typer.Argument(..., metavar="FILE", help="A vLLM engine log, or - for standard input."),
) -> None:
    """Print one JSON object per recognised line of a vLLM log: line_no, kind and the event's fields.

    Reads vLLM V0 and V1 engine logs, also as docker, journald or Ray wrap them, with or without colour codes.

    Kinds: throughput, spec_decode, engine_config, engine_ready, fatal, and the plugin's plugin_* markers.
    """
    try:
        stream = sys.stdin.buffer if file == "-" else open(file, "rb")  # noqa: SIM115  (closed below)
    except OSError as exc:
        typer.echo(
            f"caovan parse-log: cannot read {file!r}: {exc.strerror or exc}. "
            "Give the path of a vLLM log file, or - to read standard input.",
            err=True,
        )
        raise typer.Exit(2) from None
    try:
        for line_no, event in parse_lines(_decoded_lines(stream)):
            sys.stdout.write(json.dumps({"line_no": line_no, **event.to_json()}) + "\n")
            sys.stdout.flush()  # events are few; `tail -f engine.log | caovan parse-log -` shows each at once
    except BrokenPipeError:
        # `caovan parse-log big.log | head`: the reader left. Point stdout at devnull so the interpreter's final
        # flush does not raise again, and stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except OSError as exc:
        typer.echo(f"caovan parse-log: I/O error while parsing {file!r}: {exc.strerror or exc}.", err=True)
        raise typer.Exit(2) from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
