"""The GDN layer vLLM instantiates once the plugin registered it: vLLM's own class with GDNCore as its core."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from vllm.utils.torch_utils import (
    LayerNameType,  # the op schema's layer-name type differs across vLLM builds
)

from caovan_kernels import contract, tensorcore75
from caovan_kernels.errors import Turbo3Unavailable
from caovan_kernels.logger import log

from . import activity, auto_choice
from .conv import CpuConv, CudaConv
from .gdn_core import run_gdn_core
from .markers import emit_once
from .settings import EnginePluginSettings

_CPU_OP = "caovan_gdn_core"


def _decide(settings: EnginePluginSettings, on_cuda: bool,
            auto: Callable[[], tuple[bool, str]] = auto_choice.on_this_process) -> tuple[bool, str]:
    """(GDNCore runs, why); auto: what caovan_mode=auto measured for this process's GPU."""
    if not settings.enabled:
        return False, "plugin disabled (caovan=false / CAOVAN_ENABLE=0): stock vLLM kernels"
    if settings.mode == "off":
        return False, "caovan_mode=off: stock vLLM kernels, the plugin only reports"
    if settings.mode == "force":
        where = "CUDA" if on_cuda else "CPU through Triton's interpreter"
        return True, f"caovan_mode=force: GDNCore kernels on {where}"
    if not on_cuda:
        return False, "caovan_mode=auto: no CUDA GPU, stock vLLM CPU kernels (caovan_mode=force runs ours here)"
    ours, why = auto()
    if ours:
        return True, f"caovan_mode=auto: {why}"
    if settings.require_turbo3:  # an explicit demand for GDNCore outranks auto's speed choice
        return True, f"caovan_mode=auto with caovan_require_turbo3: GDNCore kernels although {why}"
    return False, f"caovan_mode=auto: {why}; caovan_mode=force runs GDNCore here"


def _announce(settings: EnginePluginSettings, vllm_config: Any, active: bool, reason: str) -> None:
    emit_once(contract.mode_line(settings.mode))
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None and getattr(spec, "method", None) in ("mtp", "qwen3_next_mtp", "qwen3_5_mtp"):
        emit_once(contract.mtp_line(spec.num_speculative_tokens))
    emit_once(contract.gdncore_line(active, reason))


def _forward_metadata(prefix: str) -> Any:
    from vllm.forward_context import get_forward_context

    meta = get_forward_context().attn_metadata
    return meta.get(prefix) if isinstance(meta, dict) else None


def _cpu_core(mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: torch.Tensor,
              layer_name: LayerNameType) -> None:
    from vllm.forward_context import get_forward_context
    from vllm.utils.torch_utils import _resolve_layer_name

    layer = get_forward_context().no_compile_layers[_resolve_layer_name(layer_name)]
    meta = _forward_metadata(layer.prefix)
    if meta is None:  # profiling run: vLLM only measures memory here
        return
    run_gdn_core(layer, meta, mixed_qkv, b, a, core_attn_out, CpuConv())
    if meta.num_actual_tokens == 0:
        return
    if meta.num_prefills > 0:
        activity.record("prefill")
    if meta.num_spec_decodes > 0 or (meta.num_prefills == 0 and meta.num_decodes > 0):
        activity.record("decode")


def _register_cpu_op() -> None:
    if hasattr(torch.ops.vllm, _CPU_OP):
        return
    from vllm.utils.torch_utils import direct_register_custom_op

    # An opaque op that writes core_attn_out: vLLM compiles the model graph, and only an op whose output is read
    # survives it (the same contract as vLLM's own *_gdn_attention_core ops).
    direct_register_custom_op(op_name=_CPU_OP, op_func=_cpu_core, mutates_args=["core_attn_out"])


def make_layer_class(base: type, cpu_path: bool) -> type:
    class CaovanGatedDeltaNet(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            from vllm.config import get_current_vllm_config
            from vllm.platforms import current_platform

            vllm_config = get_current_vllm_config()
            settings = EnginePluginSettings.from_env().with_additional_config(vllm_config.additional_config)
            # The plugin settled TensorCore75 from the environment; a caovan_turing_mma given only in
            # --additional-config (plain `vllm serve`) is seen here first, before the model's kernels compile.
            tensorcore75.process().activate(settings.turing_mma)
            on_cuda = current_platform.is_cuda()
            active, reason = _decide(settings, on_cuda)
            if active and not on_cuda and not cpu_path:
                active, reason = False, "this vLLM's GDN layer has no CPU seam for GDNCore"
            _announce(settings, vllm_config, active, reason)
            if settings.require_turbo3 and not active:
                raise Turbo3Unavailable(
                    f"Caovan: caovan_require_turbo3 is set but GDNCore cannot run in layer {self.prefix}: {reason}. "
                    "Fix the cause, or unset CAOVAN_REQUIRE_TURBO3 / caovan_require_turbo3 to run stock kernels."
                )
            if active and not on_cuda:
                # Triton reads this when our kernels are first imported, which happens after this point.
                os.environ["TRITON_INTERPRET"] = "1"
                _register_cpu_op()
            self._caovan_active = active
            # CUDA decode steps are counted on the GPU (graph replays run no Python), by the first layer only.
            self._caovan_steps = (
                activity.claim_device_counter(torch.device("cuda", torch.cuda.current_device()))
                if active and on_cuda else None
            )

        def forward_cpu(self, hidden_states: torch.Tensor) -> torch.Tensor:
            if not self._caovan_active:
                return super().forward_cpu(hidden_states)
            from vllm.utils.torch_utils import _encode_layer_name

            mixed_qkv, z, b, a = self._caovan_project(hidden_states)
            core_attn_out = torch.zeros(
                (hidden_states.size(0), self.num_v_heads // self.tp_size, self.head_v_dim),
                dtype=hidden_states.dtype, device=hidden_states.device,
            )
            getattr(torch.ops.vllm, _CPU_OP)(mixed_qkv, b, a, core_attn_out, _encode_layer_name(self.prefix))
            return self._output_projection(core_attn_out, z)

        def _caovan_project(self, hidden_states: torch.Tensor):
            """Input projections split into (mixed q|k|v, z, b, a), for both checkpoint layouts."""
            mixed_qkvz, _ = self.in_proj_qkvz(hidden_states)
            ba, _ = self.in_proj_ba(hidden_states)
            if self.gqa_interleaved_layout:  # Qwen3-Next: per key-head groups [q k v z] and [b a]
                q, k, v, z, b, a = self.fix_query_key_value_ordering(mixed_qkvz, ba)
                mixed_qkv = torch.cat([t.reshape(t.size(0), -1) for t in (q, k, v)], dim=-1)
                return mixed_qkv, z, b, a
            qkv_size = (self.key_dim * 2 + self.value_dim) // self.tp_size
            mixed_qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)
            b, a = ba.chunk(2, dim=-1)
            return mixed_qkv, z.reshape(z.size(0), -1, self.head_v_dim), b.contiguous(), a.contiguous()

        def _forward_core(self, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                          core_attn_out: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            if not self._caovan_active:
                return super()._forward_core(mixed_qkv, b, a, core_attn_out, *args, **kwargs)
            meta = _forward_metadata(self.prefix)
            if meta is None:  # profiling run
                return None
            run_gdn_core(self, meta, mixed_qkv, b, a, core_attn_out, CudaConv())
            if meta.num_prefills > 0:
                activity.record_cuda_prefill(meta.non_spec_state_indices_tensor[: meta.num_prefills + meta.num_decodes])
            if self._caovan_steps is not None and (meta.num_decodes > 0 or meta.num_spec_decodes > 0):
                self._caovan_steps.add_(1)
            return None

    CaovanGatedDeltaNet.__qualname__ = CaovanGatedDeltaNet.__name__ = f"Caovan{base.__name__}"
    return CaovanGatedDeltaNet


def announce_seam(seam_name: str) -> None:
    log(f"[Caovan GDNCore] GDN interface check: taking over through {seam_name}")
