"""Split-QK step: L2-normalise q and k rows and fold the attention scale into q.

The chunked prefill reads every key row several times, so normalising once up front is cheaper than in each
kernel. The decode kernel normalises in place instead (one launch per step matters more there).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from caovan_kernels.gdn._common import head_block, token_major

EPS = tl.constexpr(1e-6)  # same epsilon as vLLM's and fla's in-kernel l2norm


@triton.jit
def _l2norm_scale_kernel(
    x_ptr,
    y_ptr,
    stride_x_tok,
    heads,
    dim,
    scale,
    BD: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    tok, head = row // heads, row % heads
    cols = tl.arange(0, BD)
    mask = cols < dim
    x = tl.load(x_ptr + tok * stride_x_tok + head * dim + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * (tl.rsqrt(tl.sum(x * x, 0) + EPS) * scale)
    tl.store(y_ptr + row * dim + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def l2norm_scale(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """x / sqrt(sum(x^2) + 1e-6) * scale over the last dim; x is [.., T, heads, dim]; returns a dense copy."""
    x, stride_tok = token_major(x)
    heads, dim = x.shape[-2], x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = y.numel() // dim
    if rows:
        _l2norm_scale_kernel[(rows,)](x, y, stride_tok, heads, dim, scale, BD=head_block(dim), num_warps=1)
    return y


def l2norm_scale_qk(q: torch.Tensor, k: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The split-QK step of decode/prefill: (normalised q * scale, normalised k)."""
    return l2norm_scale(q, scale), l2norm_scale(k, 1.0)
