"""The vLLM arguments a user passed: which flags they pinned (those always win over the profile) and their values.

Flag names are compared in vLLM's canonical form: underscores read as dashes (`--max_model_len` is
`--max-model-len`), aliases and `--no-` forms mapped to the flag's first long name when the installed parser says
so (`-tp` is `--tensor-parallel-size`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .vllm_abilities import VllmAbilities

# vLLM reads its token and byte counts (--max-model-len, --max-num-batched-tokens, --kv-cache-memory-bytes) as
# human-readable integers: k/m/g/t decimal (25.6k = 25,600), K/M/G/T binary and whole (32K = 32,768);
# --max-model-len also takes -1 or "auto" (vLLM picks the longest that fits).
_COUNT = re.compile(r"(\d+(?:\.\d+)?)([kmgt]?)|(\d+)([KMGT])")
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
AUTO = ("auto", "-1")


def read_count(value: str) -> int:
    """A count as vLLM reads it; ValueError when vLLM would refuse it too."""
    m = _COUNT.fullmatch(value.strip())
    number = None if m is None else int(m.group(3)) * _BINARY[m.group(4)] if m.group(3) else \
        float(m.group(1)) * _DECIMAL[m.group(2)]
    if number is None or not float(number).is_integer():
        raise ValueError(f"{value!r} is not a whole count as vLLM reads one (e.g. 32768, 32k = 32,000, "
                         "32K = 32,768)")
    return int(number)


@dataclass(frozen=True)
class UserFlag:
    canonical: str
    written: str  # as the user wrote it, without any `=value`
    value: str | None
    start: int  # token span in the user's argument list
    end: int


def _normalise(option: str) -> str:
    if option.startswith("--"):
        return "--" + option[2:].replace("_", "-")
    return option


def canonical_flag(option: str, abilities: VllmAbilities) -> tuple[str, bool | None]:
    """(vLLM's canonical name of an option, whether it takes a value; None where the parser is unknown)."""
    option = _normalise(option)
    if abilities.options and option in abilities.options:
        return abilities.options[option]
    return ("--" + option[5:] if option.startswith("--no-") else option), None


def parse_user_args(args: list[str], abilities: VllmAbilities) -> list[UserFlag]:
    flags: list[UserFlag] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("-") or token == "-":
            i += 1
            continue
        written, has_inline, inline = token.partition("=")
        written = _normalise(written)
        canonical, takes_value = canonical_flag(written, abilities)
        if has_inline:
            flags.append(UserFlag(canonical, written, inline, i, i + 1))
            i += 1
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        # Unknown to the parser: a following token that is not an option is its value.
        if takes_value is None:
            takes_value = nxt is not None and not (nxt.startswith("-") and not _is_number(nxt))
        if takes_value and nxt is not None:
            flags.append(UserFlag(canonical, written, nxt, i, i + 2))
            i += 2
        else:
            flags.append(UserFlag(canonical, written, None, i, i + 1))
            i += 1
    return flags


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class PinnedArgs:
    args: list[str]
    flags: list[UserFlag]

    def pinned(self, *canonical: str) -> UserFlag | None:
        for flag in self.flags:
            if flag.canonical in canonical:
                return flag
        return None

    def value(self, canonical: str) -> str | None:
        flag = self.pinned(canonical)
        return flag.value if flag else None

    def count(self, canonical: str) -> int | None:
        """The flag's value read as vLLM reads counts; None when it is not pinned or is pinned to vLLM's "auto".
        ValueError (what the value was, what vLLM takes) when vLLM would refuse it."""
        value = self.value(canonical)
        if value is None or value.strip().lower() in AUTO:
            return None
        try:
            return read_count(value)
        except ValueError as exc:
            raise ValueError(f"{canonical} {exc}") from None

    def without(self, dropped: list[UserFlag]) -> list[str]:
        spans = {i for flag in dropped for i in range(flag.start, flag.end)}
        return [token for i, token in enumerate(self.args) if i not in spans]


def read_pinned(args: list[str], abilities: VllmAbilities) -> PinnedArgs:
    return PinnedArgs(list(args), parse_user_args(list(args), abilities))
