"""Launch a Triton kernel through its compiled launcher, skipping the JIT dispatcher on repeat calls.

Decode runs eagerly once per GDN layer per step; Triton's dispatcher (argument binding, specialisation, cache
key) costs tens of microseconds for a kernel with many arguments, more than the kernel itself. The first call
of each specialisation goes through the dispatcher (which compiles); later calls with the same specialisation
key (tensor dtypes, all tensors 16-byte aligned, exact scalar values, grid) call the compiled launcher directly.
"""

from __future__ import annotations

from functools import reduce
from operator import attrgetter, or_

import torch
from triton.runtime import driver

from caovan_kernels.gdn._common import interpreting

_data_ptr = torch.Tensor.data_ptr
_dtype = attrgetter("dtype")


class CachedLaunch:
    """For kernels whose parameters are: tensors, then scalars, then constexprs (checked on first compile)."""

    def __init__(self, kernel: object) -> None:
        self.kernel = kernel
        self.compiled: dict[tuple, object] = {}

    def __call__(
        self, grid: tuple[int, int], tensors: tuple[torch.Tensor, ...], scalars: tuple, constexprs: dict[str, object],
        num_warps: int,
    ) -> None:  # fmt: skip
        args = tensors + scalars
        # Triton specialises pointers on 16-byte alignment and ints on their values; the key holds both (scalars
        # by value), and a misaligned tensor always takes the dispatcher
        aligned = reduce(or_, map(_data_ptr, tensors)) & 15 == 0
        if interpreting() or not aligned:
            self.kernel[grid](*args, **constexprs, num_warps=num_warps)
            return
        key = (grid, num_warps, scalars, tuple(map(_dtype, tensors)), *constexprs.values())
        compiled = self.compiled.get(key)
        if compiled is None:
            # constexprs are the trailing parameters, so positional args + their values is the full argument list
            assert list(self.kernel.arg_names[len(args) :]) == list(constexprs), "constexprs must be the last parameters"
            self.compiled[key] = self.kernel[grid](*args, **constexprs, num_warps=num_warps)
            return
        stream = driver.active.get_current_stream(tensors[0].device.index)
        compiled.run(
            grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
            *args, *constexprs.values(),
        )  # fmt: skip
