"""What the engine is started with: model, vLLM arguments, environment and Python path of one plugin version."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import caovan_kernels
from caovan_kernels import contract
from caovan_kernels.draft_vocab import hot_set
from caovan_kernels.errors import DraftVocabError
from caovan_manager.config import Settings, engine_environment
from caovan_manager.errors import ConfigError
from caovan_manager.supervisor.messages import DraftSetting

from .process import LaunchSpec


@dataclass(frozen=True)
class EngineTarget:
    """The model and arguments, resolved once per daemon."""

    model: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)  # defaults: the daemon's environment and settings win
    embedded: bool = False
    gpus: tuple[int, ...] | None = None  # a models-table entry's GPUs (CUDA_VISIBLE_DEVICES); None = the settings'
    env_overrides: dict[str, str] = field(default_factory=dict)  # a models-table entry's env: wins over everything


def resolve_target(settings: Settings, embedded_model: Callable[[], Path] | None = None) -> EngineTarget:
    """The configured model, or without one the embedded default: `embedded_model()` gives its folder (the
    composition root passes the demo builder, so resolving a target never trains a model unasked)."""
    if settings.engine.model:
        model = Path(settings.engine.model).expanduser()
        # The engine runs in its own run folder, so a relative model directory is made absolute here; a name that
        # is no local path (a Hugging Face model id) goes to vLLM as given.
        local = model.resolve() if model.exists() else None
        return EngineTarget(str(local) if local else settings.engine.model, list(settings.engine.args))
    if embedded_model is None:
        raise ConfigError("no model is configured: give one (`caovan serve MODEL`, engine.model or a models table)")
    model_dir = embedded_model()
    return EngineTarget(str(model_dir), contract.embedded_engine_args() + list(settings.engine.args),
                        contract.embedded_engine_env(), embedded=True)


def bundled_root() -> Path:
    """The folder holding the daemon's own caovan_kernels (site-packages, or the checkout in development)."""
    return Path(caovan_kernels.__file__).resolve().parent.parent


def build_launch(settings: Settings, target: EngineTarget, socket_path: Path, cwd: Path,
                 site_dir: Path | None) -> LaunchSpec:
    """The engine's argument list (no shell) and environment for one run.

    A plugin version's site folder goes first on PYTHONPATH: Python imports the first caovan_kernels it finds and
    importlib.metadata keeps the first distribution of a name, so vLLM's plugin loader and `-m
    caovan_kernels.serve` both take that copy. The working directory is a neutral run folder, because a folder
    named caovan_kernels in the working directory would shadow every installed version."""
    # Explicit environment wins over the embedded defaults.
    env = engine_environment(settings, base={**target.env, **os.environ})
    if target.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in target.gpus)
    env.update(target.env_overrides)
    # vLLM's processes talk over ZeroMQ sockets created under VLLM_RPC_BASE_PATH (default: the shared temporary
    # folder, permissions from the umask, never removed): in the daemon's private folder only its user reaches them,
    # and they go with the folder.
    env.setdefault("VLLM_RPC_BASE_PATH", str(socket_path.parent))
    paths = ([str(site_dir)] if site_dir else []) + [str(bundled_root())]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # No access log from the engine: every request it serves comes through the daemon's relay, so each line would
    # say only "127.0.0.1 POST /v1/... 200", which /metrics already counts by model, endpoint and status; and
    # reading that line woke the daemon while it relayed the very response (0.15 ms of the hop on the development
    # machine, docs/benchmarks.md). The daemon's own access log (`access_log`) has the clients' addresses.
    # The engine listens on a Unix socket in the daemon's private folder and on no TCP port (vLLM binds only the
    # socket when --uds is given), so only the daemon reaches it; it comes after the user's arguments: argparse keeps
    # the last, so the engine listens where the daemon chose.
    command = [sys.executable, "-m", "caovan_kernels.serve", target.model, *target.args,
               "--uds", str(socket_path), "--disable-uvicorn-access-log"]
    return LaunchSpec(command=command, env=env, cwd=cwd, socket_path=socket_path)


def with_additional_config(args: list[str], keys: dict[str, Any]) -> list[str]:
    """`args` with `keys` added to vLLM's --additional-config: merged into the value the arguments already give (the
    last one, which argparse keeps) and passed last, so the user's other keys stay."""
    given = option_value(args, "--additional-config")
    try:
        merged = json.loads(given) if given else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the engine arguments' --additional-config is not JSON ({exc}): {given!r}; write it as a "
                          f"JSON object, e.g. '{{\"caovan_mode\": \"auto\"}}'") from None
    if not isinstance(merged, dict):
        raise ConfigError(f"the engine arguments' --additional-config is {given!r}, not a JSON object")
    return [*args, "--additional-config", json.dumps({**merged, **keys})]


def draft_vocab_in(args: list[str]) -> DraftSetting:
    """The caovan_draft_vocab setting engine arguments give (canonical; None: off, or not readable, which
    caovan-vllm-serve then refuses with the reason)."""
    given = option_value(args, "--additional-config")
    try:
        extra = json.loads(given) if given else {}
        spec = hot_set.DraftVocabSpec.parse(extra.get(hot_set.SETTING)) if isinstance(extra, dict) else None
    except (ValueError, DraftVocabError):
        return None
    return None if spec is None else spec.setting()


def served_names(args: list[str]) -> list[str]:
    """The names of the last `--served-model-name` (vLLM takes several: the first is the one it reports), as argparse
    would read them; empty when none is given."""
    names: list[str] = []
    for index, part in enumerate(args):
        if part == "--served-model-name":
            names = list(itertools.takewhile(lambda value: not value.startswith("-"), args[index + 1:]))
        elif part.startswith("--served-model-name="):
            names = [part.split("=", 1)[1]]
    return names


def option_value(args: list[str], option: str) -> str | None:
    """The last value of `option` in an argument list (`--x v` or `--x=v`), as argparse would read it."""
    value = None
    for index, part in enumerate(args):
        if part == option and index + 1 < len(args):
            value = args[index + 1]
        elif part.startswith(option + "="):
            value = part.split("=", 1)[1]
    return value
