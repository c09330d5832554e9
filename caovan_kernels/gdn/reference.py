"""Plain-torch oracles for the Gated DeltaNet kernels beside this file.

The recurrence, per value head, with the state S laid out [K, V]:

    S_t = exp(g_t) * S_{t-1}
    S_t = S_t + k_t (beta_t * (v_t - S_t^T k_t))^T
    o_t = scale * S_t^T q_t

Everything here runs token by token in float64 on whatever device the inputs
live on; it is slow by design and is the thing the kernels are checked against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gate_from_raw(
    A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, softplus_beta: float = 1.0, threshold: float = 20.0
) -> torch.Tensor:
    """Log-space decay g = -exp(A_log) * softplus(a + dt_bias), as Qwen3-Next/Qwen3.5 compute it."""
    x = a.double() + dt_bias.double()
    softplus = torch.where(softplus_beta * x <= threshold, torch.log1p(torch.exp(softplus_beta * x)) / softplus_beta, x)
    return -torch.exp(A_log.double()) * softplus


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (the eps vLLM and fla use)."""
    x = x.double()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sequence. q, k: [T, H, K]; v: [T, HV, V]; g, beta: [T, HV]; initial_state: [HV, K, V].

    Returns (o [T, HV, V], final state [HV, K, V], state after every token [T, HV, K, V]), all float64.
    """
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    group = HV // H
    q, k = q.double(), k.double()
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q.repeat_interleave(group, dim=1) * scale
    k = k.repeat_interleave(group, dim=1)
    v, g, beta = v.double(), g.double(), beta.double()
    state = torch.zeros(HV, K, V, dtype=torch.float64, device=q.device)
    if initial_state is not None:
        state = state + initial_state.double()
    out = torch.empty(T, HV, V, dtype=torch.float64, device=q.device)
    states = torch.empty(T, HV, K, V, dtype=torch.float64, device=q.device)
    for t in range(T):
        state = state * torch.exp(g[t])[:, None, None]
        residual = v[t] - torch.einsum("hkv,hk->hv", state, k[t])
        state = state + torch.einsum("hk,hv->hkv", k[t], residual * beta[t][:, None])
        out[t] = torch.einsum("hkv,hk->hv", state, q[t])
        states[t] = state
    return out, state, states


def chunked_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked WY form that chunk.py implements, in float64 torch (same shapes as recurrent_gated_delta_rule).

    Per chunk, with cumulative decays G and A_ij = beta_i exp(G_i - G_j) k_i.k_j below the diagonal, the inverse
    with the write strengths folded into its columns, Ti = (I + A)^-1 diag(beta):
    v' = Ti (v - exp(G) (k S))    (the classic form's u - w S, with u = Ti v and w = Ti diag(exp(G)) k),
    o = scale (exp(G) (q S) + tril(exp(G_i - G_j) q_i.k_j) v'),  S <- exp(G_last) S + k^T (exp(G_last - G) v').
    """
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    group = HV // H
    q = q.double().repeat_interleave(group, dim=1).transpose(0, 1)  # [HV, T, K]
    k = k.double().repeat_interleave(group, dim=1).transpose(0, 1)
    v, g, beta = v.double().transpose(0, 1), g.double().t(), beta.double().t()  # [HV, T, ...]
    state = torch.zeros(HV, K, V, dtype=torch.float64, device=q.device)
    if initial_state is not None:
        state = state + initial_state.double()
    out = torch.empty(HV, T, V, dtype=torch.float64, device=q.device)
    for lo in range(0, T, chunk):
        hi = min(lo + chunk, T)
        qc, kc, vc, bc = q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], beta[:, lo:hi]
        G = torch.cumsum(g[:, lo:hi], dim=1)
        decay = torch.exp(G[:, :, None] - G[:, None, :])  # [HV, C, C], exp(G_i - G_j)
        n = hi - lo
        strict = torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-1)
        A = torch.where(strict, bc[:, :, None] * decay * (kc @ kc.transpose(1, 2)), 0.0)
        inverse = torch.linalg.inv(torch.eye(n, dtype=torch.float64, device=q.device) + A) * bc[:, None, :]
        v_new = inverse @ (vc - torch.exp(G)[:, :, None] * (kc @ state))
        qk = torch.where(strict | torch.eye(n, dtype=torch.bool, device=q.device), decay * (qc @ kc.transpose(1, 2)), 0.0)
        out[:, lo:hi] = scale * (torch.exp(G)[:, :, None] * (qc @ state) + qk @ v_new)
        g_last = G[:, -1]
        state = state * torch.exp(g_last)[:, None, None] + kc.transpose(1, 2) @ (v_new * torch.exp(g_last[:, None] - G)[:, :, None])
    return out.transpose(0, 1), state


def varlen_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    cu_seqlens: list[int],
    initial_states: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed sequences (tokens on dim 0, bounds in cu_seqlens); initial_states [N, HV, K, V].

    Returns (o [T, HV, V], final states [N, HV, K, V]) in float64.
    """
    outs, finals = [], []
    for n in range(len(cu_seqlens) - 1):
        lo, hi = cu_seqlens[n], cu_seqlens[n + 1]
        h0 = None if initial_states is None else initial_states[n]
        o, final, _ = recurrent_gated_delta_rule(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], scale, h0, use_qk_l2norm)
        outs.append(o)
        finals.append(final)
    return torch.cat(outs), torch.stack(finals)


def sigmoid_gating_update(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    state_cache: torch.Tensor,
    cu_seqlens: list[int],
    ssm_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor | None,
    state_v_first: bool,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
    """vLLM's decode / spec-verify semantics on a state cache, token-packed inputs (q [T, H, K]).

    Sequence n starts from slot indices[n, accepted[n] - 1] (indices[n] without spec) and writes the state after
    its token t into slot indices[n, t] (indices[n] for its last token without spec). A slot index <= 0 is vLLM's
    null block or padding: a sequence whose start slot is null is skipped whole, and null slots are never written.

    Returns (o [T, HV, V] float64 with skipped sequences' rows zero, the updated cache (a copy), which rows ran).
    """
    cache = state_cache.clone()
    g = gate_from_raw(A_log, a, dt_bias)
    beta = torch.sigmoid(b.double())
    o = torch.zeros(v.shape, dtype=torch.float64, device=v.device)
    ran = []
    spec = ssm_state_indices.dim() == 2
    for n in range(len(cu_seqlens) - 1):
        lo, hi = cu_seqlens[n], cu_seqlens[n + 1]
        row = ssm_state_indices[n]
        start = int(row[int(num_accepted_tokens[n]) - 1]) if spec and num_accepted_tokens is not None else int(row[0] if spec else row)
        if start <= 0 or hi == lo:
            ran.append(False)
            continue
        ran.append(True)
        h0 = cache[start].double()
        if state_v_first:
            h0 = h0.transpose(-1, -2)
        out, _, states = recurrent_gated_delta_rule(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], scale, h0, use_qk_l2norm)
        o[lo:hi] = out
        targets = [int(row[t]) for t in range(hi - lo)] if spec else [None] * (hi - lo - 1) + [int(row)]
        for t, slot in enumerate(targets):
            if slot is not None and slot > 0:
                s = states[t].transpose(-1, -2) if state_v_first else states[t]
                cache[slot] = s.to(cache.dtype)
    return o, cache, ran


def random_gates(shape: tuple[int, ...], strength: str, generator: torch.Generator) -> torch.Tensor:
    """Log-space decays: 'none' ~ -1e-4 (state kept), 'mild' ~ -0.05, 'strong' down to -5 (state forgotten)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    scale = {"none": 1e-4, "mild": 0.1, "strong": 5.0}[strength]
    return -(u * scale)


def unit_keys(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Random rows of unit L2 norm: the model l2-normalises k, which keeps the recurrence contractive."""
    return F.normalize(torch.randn(shape, generator=generator, dtype=torch.float64), dim=-1)
