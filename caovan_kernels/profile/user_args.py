"""The vLLM arguments a user passed: which flags they pinned (those always win over the profile) and their values.

Flag names are compared in vLLM's canonical form: underscores read as dashes (`--max_model_len` is
`--max-model-len`), aliases and `--no-` forms mapped to the flag's first long name when the installed parser says
so (`-tp` is `--tensor-parallel-size`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .vllm_abilities import VllmAbilities

# vLLM reads these counts as human-readable integers (its others, --max-num-seqs among them, as plain int): a number
# with a k/m/g/t suffix is decimal and truncated (25.6k = 25,600), with K/M/G/T binary and whole (32K = 32,768);
# anything else goes through int(). --max-model-len also takes -1 or "auto" (vLLM picks the longest that fits).
HUMAN_READABLE = frozenset({"--max-model-len", "--max-num-batched-tokens", "--kv-cache-memory-bytes"})
_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
AUTO_FLAGS = frozenset({"--max-model-len"})
AUTO = ("auto", "-1")
_EXAMPLES = "e.g. 32768, 32k = 32,000, 32K = 32,768"


def read_count(value: str, human_readable: bool = True) -> int:
    """A count as vLLM's parser reads it; ValueError where that parser refuses it."""
    value = value.strip()
    m = _SUFFIXED.fullmatch(value) if human_readable else None
    try:
        if m is None:
            return int(value)
        number, suffix = m.groups()
        return int(float(number) * _DECIMAL[suffix]) if suffix in _DECIMAL else int(number) * _BINARY[suffix]
    except ValueError:
        raise ValueError(f"{value!r} is not a count vLLM reads ("
                         + (_EXAMPLES if human_readable else "a whole number") + ")") from None


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
        """The flag's value read as vLLM reads it; None when it is not pinned, is 0 for --kv-cache-memory-bytes
        (vLLM's "unset") or is "auto" where vLLM takes it. ValueError (the flag, the value, what vLLM takes) when
        vLLM refuses it, or when it is not a positive count (vLLM's own checks refuse those at start)."""
        value = self.value(canonical)
        if value is None or (canonical in AUTO_FLAGS and value.strip().lower() in AUTO):
            return None
        try:
            count = read_count(value, canonical in HUMAN_READABLE)
        except ValueError as exc:
            raise ValueError(f"{canonical} {exc}") from None
        if count == 0 and canonical == "--kv-cache-memory-bytes":
            return None
        if count <= 0:
            raise ValueError(f"{canonical} {value!r} is not a positive count")
        return count

    def without(self, dropped: list[UserFlag]) -> list[str]:
        spans = {i for flag in dropped for i in range(flag.start, flag.end)}
        return [token for i, token in enumerate(self.args) if i not in spans]


def read_pinned(args: list[str], abilities: VllmAbilities) -> PinnedArgs:
    return PinnedArgs(list(args), parse_user_args(list(args), abilities))
