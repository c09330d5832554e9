"""Launch the autotuned probe matmul (probe_kernels.tuned_matmul_kernel) compile-only, with TensorCore75 on, and print
as JSON what was compiled, what the autotuner timed and what was logged.

    python tests/sm75/autotune_probe.py sm75|sm80     (TRITON_INTERPRET unset; TRITON_CACHE_DIR set by the caller)

sm75: a 2080 Ti (turing/compile_only.py); sm80: an sm_80 device, where Triton compiles without TensorCore75.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_kernels as pk  # noqa: E402
import torch  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

from caovan_kernels import tensorcore75  # noqa: E402
from caovan_kernels.tensorcore75.pipeline import LOCAL_BYTES_KEY, METADATA_KEY  # noqa: E402
from caovan_kernels.turing.compile_only import make_process_compile_only  # noqa: E402
from caovan_kernels.turing.device_view import RTX_2080_TI  # noqa: E402

LOG: list[str] = []
VIEWS = {"sm75": RTX_2080_TI, "sm80": dataclasses.replace(RTX_2080_TI, name="an sm_80 GPU", capability=(8, 0))}
M = N = 128


def _name(tile: int, num_warps: int, num_stages: int) -> str:
    return f"BM={tile} num_warps={num_warps} num_stages={num_stages}"


def _config_name(config: Any) -> str:
    return _name(config.kwargs["BM"], config.num_warps, config.num_stages)


def main(scenario: str) -> dict:
    make_process_compile_only(VIEWS[scenario])
    original = Autotuner.prune_configs
    tensorcore75._process = tensorcore75.TensorCore75Hook(LOG.append)
    tensorcore75.process().activate("force")
    compiled: list[dict] = []

    def listener(*, src, metadata, metadata_group, times, cache_hit) -> None:
        constants = {src.fn.arg_names[path[0]]: value for path, value in src.constants.items()}
        compiled.append({"config": _name(constants["BM"], metadata["num_warps"], metadata["num_stages"]),
                         "decision": metadata.get(METADATA_KEY), "local_bytes": metadata.get(LOCAL_BYTES_KEY)})

    knobs.compilation.listener = listener
    runs = []
    for k in (64, 72):  # two tuning keys (72: not a multiple of 16, another binary): pruned for each, logged once
        a, b, c = torch.empty(M, k, dtype=torch.float16), torch.empty(k, N, dtype=torch.float16), torch.empty(M, N)
        before = len(compiled)
        pk.tuned_matmul_kernel[lambda meta: (M // meta["BM"], N // meta["BN"])](a, b, c, N, k, BK=32)
        runs.append({"compiled": compiled[before:],
                     "timed": [_config_name(config) for config in pk.tuned_matmul_kernel.configs_timings],
                     "best": _config_name(pk.tuned_matmul_kernel.best_config)})
    tensorcore75.process().activate("off")
    return {"runs": runs, "log": LOG, "restored": Autotuner.prune_configs is original}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
