"""Random GDN inputs shared by the kernel tests (tolerances and the error measure: caovan_kernels/gdn/accuracy.py).

Keys are unit-norm as in the model (the layer l2-normalises them), which keeps the recurrence contractive.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from caovan_kernels.gdn import reference as R


@dataclass
class Inputs:
    q: torch.Tensor  # [B, T, H, K]
    k: torch.Tensor
    v: torch.Tensor  # [B, T, HV, V]
    g: torch.Tensor  # [B, T, HV] fp32 log decay
    beta: torch.Tensor  # [B, T, HV] in the input dtype


def make_inputs(
    gen: torch.Generator, batch: int, T: int, H: int, HV: int, K: int, V: int, dtype: torch.dtype, gates: str,
    device: torch.device,
) -> Inputs:  # fmt: skip
    q = torch.randn(batch, T, H, K, generator=gen, dtype=torch.float64)
    k = R.unit_keys((batch, T, H, K), gen)
    v = torch.randn(batch, T, HV, V, generator=gen, dtype=torch.float64)
    g = R.random_gates((batch, T, HV), gates, gen)
    beta = torch.rand(batch, T, HV, generator=gen, dtype=torch.float64)
    return Inputs(q.to(device, dtype), k.to(device, dtype), v.to(device, dtype), g.to(device, torch.float32), beta.to(device, dtype))


def random_states(gen: torch.Generator, n: int, HV: int, K: int, V: int, device: torch.device) -> torch.Tensor:
    """fp32 states [n, HV, K, V] of the size a running sequence reaches (entries ~0.1)."""
    return (0.1 * torch.randn(n, HV, K, V, generator=gen, dtype=torch.float64)).to(device, torch.float32)
