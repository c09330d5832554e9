"""Read an AWQ layer with vLLM's own loader code, in a child process: `python -m tests.support.vllm_awq IN OUT`.

vLLM's AWQ linear method converts a checkpoint's qweight / qzeros at load time (`_convert_awq_to_standard_format`,
plain torch) into the GPTQ-like layout its kernels take: qweight packed along the input dim in plain nibble order,
qzeros transposed. Its CPU int4 GEMM (the only kernel that would dequantize here) needs AVX-512, so the converted
integers are unpacked with vLLM's unpacker and dequantized as that layout defines: (q[k, n] - z[n, g]) * s[g, n].
A child process, because vLLM's parameters need its tensor-parallel group, which this sets up once (world size 1,
gloo on loopback) and which must not leak into the test process."""

from __future__ import annotations

import socket
import sys

import torch
from safetensors.torch import load_file, save_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(src: str, dst: str) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.layers.quantization.auto_awq import (
        _convert_awq_to_standard_format,
    )
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        unpack_quantized_values_into_int32,
    )
    from vllm.scalar_type import scalar_types

    tensors = load_file(src)
    group_size = int(tensors.pop("group_size").item())
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        initialize_model_parallel(1, 1)
        layer = torch.nn.Module()
        for name in ("qweight", "qzeros"):
            layer.register_parameter(name, torch.nn.Parameter(tensors[name], requires_grad=False))
        _convert_awq_to_standard_format(layer, "qweight", "qzeros", 4)
    q = unpack_quantized_values_into_int32(layer.qweight.data, scalar_types.uint4, packed_dim=0)  # [K, N]
    zeros = unpack_quantized_values_into_int32(layer.qzeros.data, scalar_types.uint4, packed_dim=0)  # [N, G]
    group_of_row = torch.arange(q.shape[0]) // group_size
    weight = (q - zeros.t()[group_of_row]).float() * tensors["scales"].float()[group_of_row]
    save_file({"weight": weight.t().contiguous(), "q": q.contiguous(), "zeros": zeros.t().contiguous()}, dst)


if __name__ == "__main__":
    main(*sys.argv[1:3])
