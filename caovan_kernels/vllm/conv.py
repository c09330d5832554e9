"""The short causal convolution in front of each GDN layer, on the state caches vLLM allocates.

The convolution is not GDNCore's business (it is cheap and vLLM's own ops do it well); these adapters only give
the GDN core one interface over vLLM's CPU and CUDA conv functions, plus the rolling conv buffer of MTP decode.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F


class ConvOps(Protocol):
    def varlen(self, layer: Any, x: torch.Tensor, query_start_loc: torch.Tensor, state_indices: torch.Tensor,
               has_initial_state: torch.Tensor | None, meta: Any) -> torch.Tensor: ...

    def decode(self, layer: Any, x: torch.Tensor, state_indices: torch.Tensor) -> torch.Tensor: ...

    def spec(self, layer: Any, x: torch.Tensor, meta: Any) -> torch.Tensor: ...


def conv_weight(layer: Any) -> torch.Tensor:
    """The plain (dim, width) weight; the CPU build packs conv1d.weight in place and keeps this copy aside."""
    unpacked = getattr(layer.conv1d, "_cpu_unpacked_conv_weight", None)
    if unpacked is not None:
        return unpacked
    w = layer.conv1d.weight
    return w.view(w.size(0), w.size(-1)) if w.dim() == 3 else w


def conv_buffer(layer: Any) -> torch.Tensor:
    """The conv state cache as (slots, dim, state_len), whichever layout this vLLM stores."""
    cache = layer.kv_cache[0]
    try:
        from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first
    except ImportError:  # vLLM 0.2x stores (slots, state_len, dim)
        return cache.transpose(-1, -2)
    return cache if is_conv_state_dim_first() else cache.transpose(-1, -2)


def _width(layer: Any) -> int:
    return conv_weight(layer).size(-1)


class CpuConv:
    """vLLM's CPU conv functions, plus the MTP rolling buffer written here."""

    def varlen(self, layer, x, query_start_loc, state_indices, has_initial_state, meta):
        from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import (
            causal_conv1d_fn_cpu,
        )

        return causal_conv1d_fn_cpu(
            x.transpose(0, 1), conv_weight(layer), layer.conv1d.bias, conv_states=conv_buffer(layer),
            query_start_loc=query_start_loc, cache_indices=state_indices, has_initial_state=has_initial_state,
            activation=layer.activation,
        ).transpose(0, 1)

    def decode(self, layer, x, state_indices):
        from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import (
            causal_conv1d_update_cpu,
        )

        # With MTP configured the buffer is wider; a plain decode only uses its first width-1 columns.
        window = conv_buffer(layer)[:, :, : _width(layer) - 1]
        return causal_conv1d_update_cpu(x, window, conv_weight(layer), layer.conv1d.bias, layer.activation,
                                        conv_state_indices=state_indices)

    def spec(self, layer, x, meta):
        """Conv over each sequence's 1+S verify tokens on the rolling buffer of width-1+S columns.

        The window for the next step starts at column accepted-1: the buffer keeps the inputs of the last
        verified tokens at its end, so after `accepted` of them were kept the window slides by that much."""
        buf = conv_buffer(layer)
        width, state_len = _width(layer), buf.size(-1)
        w = conv_weight(layer).unsqueeze(1)
        n = meta.num_spec_decodes
        bounds = meta.spec_query_start_loc[: n + 1].tolist()
        slots = meta.spec_state_indices_tensor[:n, 0].tolist()
        accepted = meta.num_accepted_tokens[:n].tolist()
        out = torch.empty_like(x)
        for i in range(n):
            start, end = bounds[i], bounds[i + 1]
            if end == start or slots[i] <= 0:
                continue
            history = buf[slots[i]]
            offset = accepted[i] - 1
            seq = x[start:end].transpose(0, 1).to(history.dtype)
            window = torch.cat([history[:, offset : offset + width - 1], seq], dim=-1).unsqueeze(0)
            y = F.conv1d(window.to(w.dtype), w, layer.conv1d.bias, groups=w.size(0))[0]
            if layer.activation in ("silu", "swish"):
                y = F.silu(y)
            out[start:end] = y.transpose(0, 1).to(out.dtype)
            kept = history[:, offset + 1 : offset + 1 + state_len - (end - start)]
            history.copy_(torch.cat([kept, seq], dim=-1))
        return out


class CudaConv:
    """vLLM's Triton conv kernels (they already handle the MTP rolling buffer)."""

    def varlen(self, layer, x, query_start_loc, state_indices, has_initial_state, meta):
        from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_fn

        return causal_conv1d_fn(
            x.transpose(0, 1), conv_weight(layer), layer.conv1d.bias, activation=layer.activation,
            conv_states=conv_buffer(layer), has_initial_state=has_initial_state, cache_indices=state_indices,
            query_start_loc=query_start_loc, metadata=meta,
        ).transpose(0, 1)

    def decode(self, layer, x, state_indices):
        from vllm.model_executor.layers.mamba.ops.causal_conv1d import (
            causal_conv1d_update,
        )

        return causal_conv1d_update(x, conv_buffer(layer), conv_weight(layer), layer.conv1d.bias, layer.activation,
                                    conv_state_indices=state_indices, validate_data=False)

    def spec(self, layer, x, meta):
        from vllm.model_executor.layers.mamba.ops.causal_conv1d import (
            causal_conv1d_update,
        )

        n = meta.num_spec_decodes
        indices = meta.spec_state_indices_tensor
        return causal_conv1d_update(
            x, conv_buffer(layer), conv_weight(layer), layer.conv1d.bias, layer.activation,
            conv_state_indices=indices[:n, 0], num_accepted_tokens=meta.num_accepted_tokens,
            query_start_loc=meta.spec_query_start_loc, max_query_len=indices.size(-1), validate_data=False,
        )
