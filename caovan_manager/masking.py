"""Secrets out of every output: the daemon's keys, and the engine's own (its --api-key, tokens in its environment).

One Masker per daemon masks everything derived from the engine (log lines before they are parsed, stored or sent,
the effects' reports to the supervisor) and what the API records; its list grows once the engine's arguments are
known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

SECRET_OPTIONS: tuple[str, ...] = ("--api-key", "--hf-token", "--token")
# Variables whose values the engine may use as credentials (VLLM_API_KEY is vLLM's --api-key).
SECRET_VARIABLES: tuple[str, ...] = ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
HIDDEN = "***"
MIN_SECRET = 4

T = TypeVar("T")


def _secret_positions(args: list[str]) -> Iterator[tuple[int, str, bool]]:
    """(index, value, inline) of each value given to a secret option: `--api-key K` or `--api-key=K`."""
    take_next = False
    for index, part in enumerate(args):
        if take_next:
            take_next = False
            yield index, part, False
            continue
        option, sep, value = part.partition("=")
        if option in SECRET_OPTIONS:
            if sep:
                yield index, value, True
            else:
                take_next = True


def secret_option_values(args: Iterable[str]) -> list[str]:
    return [value for _, value, _ in _secret_positions(list(args)) if value]


def mask_text(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    return text


def mask_command(command: list[str], secrets: Iterable[str]) -> list[str]:
    """The command as shown in /status and logs: values of secret options and any known secret replaced."""
    masked = [mask_text(part, list(secrets)) for part in command]
    for index, _, inline in _secret_positions(command):
        masked[index] = f"{command[index].partition('=')[0]}={HIDDEN}" if inline else HIDDEN
    return masked


class Masker:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is hidden whole. A value of a few characters cannot be
        # told from ordinary text: masking it everywhere would garble every line (commands still hide it by place).
        self._secrets = sorted({*self._secrets, *(s for s in secrets if len(s) >= MIN_SECRET)}, key=len,
                               reverse=True)

    def add_engine(self, args: Iterable[str], env: Mapping[str, str]) -> None:
        """The engine's own credentials: secret options among its arguments, secret variables of its environment."""
        self.add([*secret_option_values(args), *(env.get(name, "") for name in SECRET_VARIABLES)])

    def text(self, text: str) -> str:
        return mask_text(text, self._secrets)

    def command(self, command: list[str]) -> list[str]:
        return mask_command(command, self._secrets)

    def deep(self, value: T) -> T:
        """`value` with every string inside it masked: strings, lists, tuples, dicts and frozen dataclasses (the
        supervisor's messages and the log events they carry)."""
        return self._deep(value)

    def _deep(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self._deep(item) for item in value)
        if isinstance(value, dict):
            return {key: self._deep(item) for key, item in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self._deep(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
            return dataclasses.replace(value, **changes)
        return value
