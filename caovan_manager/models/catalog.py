"""The models the daemon serves, resolved once at start: names, aliases, GPUs, idle ttl, and each one's engine.

Without a `models` table the daemon serves one model, as it always did (`caovan serve MODEL`, or `engine.model`):
one entry that takes every request, whatever model it names (vLLM answers a wrong name itself). With a table, the
request's `model` picks the entry, and each engine is told its names (`--served-model-name NAME ALIASES...`) so
vLLM accepts and reports the name the client used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from caovan_kernels.contract import SLEEP_MODE_FLAG
from caovan_manager.config import ModelSettings, Settings
from caovan_manager.engine.launch import EngineTarget, resolve_target, served_names
from caovan_manager.errors import UnknownModel


@dataclass(frozen=True)
class ModelEntry:
    name: str
    target: EngineTarget
    gpus: frozenset[int] | None  # None: every GPU
    aliases: tuple[str, ...] = ()
    ttl_s: float = 0.0
    preload: bool = True  # the single engine starts with the daemon; a table entry says (its default: False)
    sleep: bool = False  # swapped out by vLLM's sleep mode instead of a stop

    def overlaps(self, other: ModelEntry) -> bool:
        """Whether the two engines would share a GPU (an entry without a GPU list takes them all)."""
        if self.gpus is None or other.gpus is None:
            return True
        return bool(self.gpus & other.gpus)


@dataclass(frozen=True)
class Catalog:
    entries: tuple[ModelEntry, ...]
    routed: bool  # False: one model takes every request (no models table)

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError("a catalog needs at least one model")

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(self.entries)

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    @property
    def primary(self) -> ModelEntry:
        """The first entry: the one the single-engine endpoints (/start, /stop, /restart, plugins) act on."""
        return self.entries[0]

    def get_named(self, requested: str) -> ModelEntry:
        """The entry with this name or alias (without a models table: the one entry, by its name)."""
        for entry in self.entries:
            if requested == entry.name or requested in entry.aliases:
                return entry
        raise UnknownModel(requested, self.names)

    def lookup(self, requested: str | None) -> ModelEntry:
        """The entry a request's model name (or alias) selects."""
        if not self.routed:
            return self.primary
        return self.get_named(requested)


def build_catalog(settings: Settings, embedded_model: Callable[[], Path] | None = None,
                  target: EngineTarget | None = None) -> Catalog:
    """Resolve every model (`embedded_model()` gives the embedded default's folder, once, where an entry or the single
    engine names no model)."""
    if not settings.models:
        target = target or resolve_target(settings, embedded_model)
        names = served_names(target.args) or [target.model]
        return Catalog((ModelEntry(names[0], target, None, aliases=tuple(names[1:])),), routed=False)
    embedded: list[EngineTarget] = []

    def resolve(entry: ModelSettings) -> EngineTarget:
        # engine.args (and the command line's arguments after `--`) go to every model's engine, before its own.
        args = [*settings.engine.args, *entry.args]
        if entry.model is None:  # the demo model: built (or found in the cache) once for every entry using it
            if not embedded:
                bare = settings.engine.model_copy(update={"model": None, "args": []})
                embedded.append(resolve_target(settings.model_copy(update={"engine": bare}), embedded_model))
            return replace(embedded[0], args=[*without_served_name(embedded[0].args), *args])
        engine = settings.engine.model_copy(update={"model": entry.model, "args": args})
        return resolve_target(settings.model_copy(update={"engine": engine}))

    entries = []
    for name, entry in settings.models.items():
        target, env = resolve(entry), dict(entry.env)
        args = [*target.args, "--served-model-name", name, *entry.aliases]
        if entry.sleep:
            # vLLM serves POST /sleep and /wake_up only in its development mode; only the daemon reaches the
            # engine's port. The profile drops the flag where vLLM has no sleep mode (the CPU build).
            env.setdefault("VLLM_SERVER_DEV_MODE", "1")
            if SLEEP_MODE_FLAG not in args:
                args.append(SLEEP_MODE_FLAG)
        target = replace(target, gpus=None if entry.gpus is None else tuple(entry.gpus),
                         env_overrides=env, args=args)
        entries.append(ModelEntry(name, target, None if entry.gpus is None else frozenset(entry.gpus),
                                  tuple(entry.aliases), entry.ttl_s, entry.preload, entry.sleep))
    return Catalog(tuple(entries), routed=True)


def without_served_name(args: list[str]) -> list[str]:
    """Engine arguments less their served names (every value of each `--served-model-name`): a table entry is served
    under its own names."""
    out, skipping = [], False
    for part in args:
        if part == "--served-model-name":
            skipping = True
            continue
        if skipping and not part.startswith("-"):
            continue
        skipping = False
        if not part.startswith("--served-model-name="):
            out.append(part)
    return out
