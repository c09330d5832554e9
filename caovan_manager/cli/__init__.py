"""Entry point of the `caovan` command: importing a command module registers its command on `app`."""

from . import demo_model, doctor, parse_log, plugins, profile, serve  # noqa: F401  (registration by import)
from .app import app


def main() -> None:
    app()
