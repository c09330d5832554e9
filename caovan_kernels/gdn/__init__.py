"""GDNCore: our Triton kernels for Gated DeltaNet (prefill, decode, MTP spec verify), each beside its oracle."""

from caovan_kernels.gdn.chunk import chunk_gated_delta_rule
from caovan_kernels.gdn.l2norm import l2norm_scale, l2norm_scale_qk
from caovan_kernels.gdn.recurrent import (
    fused_recurrent_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
)

__all__ = [
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_sigmoid_gating_delta_rule_update",
    "l2norm_scale",
    "l2norm_scale_qk",
]
