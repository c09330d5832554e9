"""Prefill stage 1a: a chunk's gates, its log decays summed up within the chunk and its write strengths.

Kernel 1 (chunk_wy) starts with these for the chunk's four 16-token rows; both of its parts need the cumulative
decays G, so each forms them rather than reading them back. From raw projections the gates are vLLM's:
g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _softplus(x):
    # torch's softplus with beta 1 and threshold 20, as vLLM's gate uses
    return tl.where(x <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))), x)


@triton.jit
def _log_decays(g_ptr, A_log_ptr, dt_bias_ptr, t0, t1, t2, t3, m0, m1, m2, m3, hv, heads_v, raw_gate):
    """G for rows t0..t3 of value head hv, fp32: the log decays summed from the chunk's first token on."""
    g0 = tl.load(g_ptr + t0 * heads_v + hv, mask=m0, other=0.0).to(tl.float32)
    g1 = tl.load(g_ptr + t1 * heads_v + hv, mask=m1, other=0.0).to(tl.float32)
    g2 = tl.load(g_ptr + t2 * heads_v + hv, mask=m2, other=0.0).to(tl.float32)
    g3 = tl.load(g_ptr + t3 * heads_v + hv, mask=m3, other=0.0).to(tl.float32)
    if raw_gate:  # g holds a raw projection: decay = -exp(A_log) * softplus(g + dt_bias)
        neg_a = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
        bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
        g0 = tl.where(m0, neg_a * _softplus(g0 + bias), 0.0)
        g1 = tl.where(m1, neg_a * _softplus(g1 + bias), 0.0)
        g2 = tl.where(m2, neg_a * _softplus(g2 + bias), 0.0)
        g3 = tl.where(m3, neg_a * _softplus(g3 + bias), 0.0)
    G0 = tl.cumsum(g0, 0)
    G1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
    G2 = tl.cumsum(g2, 0) + tl.sum(g0, 0) + tl.sum(g1, 0)
    G3 = tl.cumsum(g3, 0) + tl.sum(g0, 0) + tl.sum(g1, 0) + tl.sum(g2, 0)
    return G0, G1, G2, G3


@triton.jit
def _write_strengths(beta_ptr, t0, t1, t2, t3, m0, m1, m2, m3, hv, heads_v, raw_beta, beta_scale):
    """beta for rows t0..t3 of value head hv, fp32; from logits (raw_beta) sigmoid(b) * beta_scale."""
    b0 = tl.load(beta_ptr + t0 * heads_v + hv, mask=m0, other=0.0).to(tl.float32)
    b1 = tl.load(beta_ptr + t1 * heads_v + hv, mask=m1, other=0.0).to(tl.float32)
    b2 = tl.load(beta_ptr + t2 * heads_v + hv, mask=m2, other=0.0).to(tl.float32)
    b3 = tl.load(beta_ptr + t3 * heads_v + hv, mask=m3, other=0.0).to(tl.float32)
    if raw_beta:  # beta holds logits
        b0 = tl.where(m0, tl.sigmoid(b0) * beta_scale, 0.0)
        b1 = tl.where(m1, tl.sigmoid(b1) * beta_scale, 0.0)
        b2 = tl.where(m2, tl.sigmoid(b2) * beta_scale, 0.0)
        b3 = tl.where(m3, tl.sigmoid(b3) * beta_scale, 0.0)
    return b0, b1, b2, b3
