"""The GDN layer's core (conv, gates, recurrence) with GDNCore's kernels, over vLLM's batch metadata.

vLLM orders a batch as: spec-decode sequences (1+S verify tokens each, MTP), then plain decodes, then prefills.
Plain decode batches take the recurrent decode kernel; batches with prefills take the chunked kernel for all
non-spec sequences (decodes are sequences of length 1 there); spec sequences take the recurrent kernel in spec
mode, which starts from the slot of the last accepted token and keeps one state slot per verified token.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .conv import ConvOps


def _gates(layer: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-space decay g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b), fp32, [1, T, HV]."""
    g = -layer.A_log.float().exp() * F.softplus(a.float() + layer.dt_bias.float())
    return g.unsqueeze(0), b.float().sigmoid().unsqueeze(0)


def _non_spec(layer: Any, meta: Any, x: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv: ConvOps) -> torch.Tensor:
    # imported at first use: importing the kernels decides interpreted-or-compiled, after layer set TRITON_INTERPRET
    from caovan_kernels.gdn import (
        chunk_gated_delta_rule,
        fused_sigmoid_gating_delta_rule_update,
    )

    ssm = layer.kv_cache[1]
    indices = meta.non_spec_state_indices_tensor
    n_seq = meta.num_decodes + meta.num_prefills
    bounds = meta.non_spec_query_start_loc[: n_seq + 1]
    if meta.num_prefills == 0:
        x = conv.decode(layer, x, indices[: meta.num_decodes])
        q, k, v = layer.rearrange_mixed_qkv(x)
        o, _ = fused_sigmoid_gating_delta_rule_update(
            layer.A_log, a, b, layer.dt_bias, q, k, v, initial_state=ssm, inplace_final_state=True,
            cu_seqlens=bounds, ssm_state_indices=indices[: meta.num_decodes], use_qk_l2norm_in_kernel=True,
            state_v_first=True,
        )
        return o.squeeze(0)
    x = conv.varlen(layer, x, bounds, indices[:n_seq], meta.has_initial_state, meta)
    q, k, v = layer.rearrange_mixed_qkv(x)
    g, beta = _gates(layer, a, b)
    o, _ = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=ssm, output_final_state=True, cu_seqlens=bounds,
        use_qk_l2norm_in_kernel=True, state_v_first=True, ssm_state_indices=indices[:n_seq],
        has_initial_state=meta.has_initial_state,
    )
    return o.squeeze(0)


def _spec(layer: Any, meta: Any, x: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv: ConvOps) -> torch.Tensor:
    # imported at first use, as in _non_spec
    from caovan_kernels.gdn import fused_sigmoid_gating_delta_rule_update

    n = meta.num_spec_decodes
    x = conv.spec(layer, x, meta)
    q, k, v = layer.rearrange_mixed_qkv(x)
    o, _ = fused_sigmoid_gating_delta_rule_update(
        layer.A_log, a, b, layer.dt_bias, q, k, v, initial_state=layer.kv_cache[1], inplace_final_state=True,
        cu_seqlens=meta.spec_query_start_loc[: n + 1], ssm_state_indices=meta.spec_state_indices_tensor[:n],
        num_accepted_tokens=meta.num_accepted_tokens[:n], use_qk_l2norm_in_kernel=True, state_v_first=True,
    )
    return o.squeeze(0)


def run_gdn_core(layer: Any, meta: Any, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                 core_attn_out: torch.Tensor, conv: ConvOps) -> None:
    """Write the GDN core output of the batch's real tokens into core_attn_out [T, HV, V]."""
    n = meta.num_actual_tokens
    if n == 0:
        return
    mixed_qkv, b, a = mixed_qkv[:n], b[:n], a[:n]
    if meta.spec_sequence_masks is None:
        core_attn_out[:n] = _non_spec(layer, meta, mixed_qkv, b, a, conv)
        return
    if meta.num_prefills == 0 and meta.num_decodes == 0:
        core_attn_out[:n] = _spec(layer, meta, mixed_qkv, b, a, conv)
        return
    spec_rows, rest_rows = meta.spec_token_indx, meta.non_spec_token_indx
    spec_out = _spec(layer, meta, mixed_qkv.index_select(0, spec_rows), b.index_select(0, spec_rows),
                     a.index_select(0, spec_rows), conv)
    rest_out = _non_spec(layer, meta, mixed_qkv.index_select(0, rest_rows), b.index_select(0, rest_rows),
                         a.index_select(0, rest_rows), conv)
    core_attn_out.index_copy_(0, spec_rows, spec_out.to(core_attn_out.dtype))
    core_attn_out.index_copy_(0, rest_rows, rest_out.to(core_attn_out.dtype))
