"""Fatal lines: what ended (or will end) the engine, by kind. Messages are vLLM's, torch's, Triton's, NCCL's and
uvicorn's own; lines quoted from GitHub carry their source URL, the others follow the message in the source file
named beside them."""

import pytest

from caovan_manager.logwatch import Fatal, parse_line

FATAL_LINES = [
    # --- oom
    ("oom", "(EngineCore_DP0 pid=8884) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 "
            "has a total capacity of 79.11 GiB of which 140.75 MiB is free."),  # vllm-project/vllm/issues/27508
    ("oom", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacty "
            "of 23.69 GiB of which 3.09 GiB is free."),  # https://github.com/vllm-project/vllm/issues/2140
    ("oom", "RuntimeError: Worker failed with error 'CUDA error: out of memory', please check the stack trace above "
            "for the root cause"),
    # --- gpu_memory_insufficient (v1/worker/utils.py request_memory; v1/worker/cpu_worker.py on the CPU build)
    ("gpu_memory_insufficient",  # https://github.com/vllm-project/vllm/issues/33297 (Buildkite, caret-notation ANSI)
     "[2026-01-26T17:25:37Z] ^[[0;36m(EngineCore_DP0 pid=738)^[[0;0m ^[[31mERROR^[[0m ^[[90m01-26 09:25:37^[[0m "
     "^[[90m[core.py:935]^[[0m ValueError: Free memory on device cuda:0 (1.54/22.05 GiB) on startup is less than "
     "desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
     "other processes."),
    ("gpu_memory_insufficient",  # https://github.com/pytorch/pytorch/issues/175666
     "[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on "
     "startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce "
     "GPU memory used by other processes."),
    ("gpu_memory_insufficient",
     "(Worker pid=7) ValueError: Available memory on node 0 (20.10/31.00 GiB) on kv cache allocation is less than "
     "requested memory for kv (100000.00 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce "
     "CPU memory used by other processes."),
    # --- kv_cache_insufficient (v1/core/kv_cache_utils.py; V0 worker/worker.py)
    ("kv_cache_insufficient",
     "(EngineCore pid=5) ERROR 11-30 12:00:00 [core.py:1510] ValueError: To serve at least one request with the "
     "model's max seq len (262144), (16.0 GiB KV cache is needed, which is larger than the available KV cache memory "
     "(3.2 GiB). Based on the available memory, the estimated maximum model length is 52000. Try increasing "
     "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
     "initializing the engine."),
    ("kv_cache_insufficient",
     "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine."),
    ("kv_cache_insufficient",  # https://github.com/gpustack/gpustack/issues/1800 (vLLM V0)
     "ERROR 04-17 15:10:09 [engine.py:448] ValueError: The model's max seq len (8192) is larger than the maximum "
     "number of tokens that can be stored in KV cache (2400). Try increasing `gpu_memory_utilization` or decreasing "
     "`max_model_len` when initializing the engine."),
    # --- triton_smem: https://github.com/vllm-project/vllm/issues/36802 (a Turing T4)
    ("triton_smem", "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware "
                    "limit: 65536. Reducing block sizes or `num_stages` may help."),
    # --- nccl
    ("nccl", "[rank0]: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
    # https://github.com/vllm-project/vllm/issues/6732
    ("nccl", "(RayWorkerWrapper pid=4321, ip=10.0.0.2) RuntimeError: NCCL error: unhandled cuda error (run with "
             "NCCL_DEBUG=INFO for details) [repeated 6x across cluster]"),  # vllm-project/vllm/issues/7896
    ("nccl", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"),
    ("nccl", "ncclUnhandledCudaError: Call to CUDA function failed."),
    ("nccl", "[rank1]:[E1130 12:00:00.123456 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
             "milliseconds before timing out."),
    # --- port_in_use
    ("port_in_use", "OSError: [Errno 98] Address already in use"),  # https://github.com/vllm-project/vllm/issues/7514
    ("port_in_use", "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already "
                    "in use"),  # uvicorn; title of https://github.com/vllm-project/vllm/issues/7514
    ("port_in_use", "RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, "
                    "code: -98, name: EADDRINUSE, message: address already in use"),  # vllm/issues/11617
    ("port_in_use", "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')"),
    # --- cuda_error
    ("cuda_error", "RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    ("cuda_error", "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"),
    ("cuda_error", "RuntimeError: CUDA error: invalid device ordinal"),  # https://github.com/ray-project/ray/issues/42441
    # --- engine_start_failed (v1/engine/core.py, v1/engine/utils.py)
    ("engine_start_failed", "ERROR 05-23 09:31:47 [core.py:396] EngineCore failed to start."),  # vllm/issues/18730
    ("engine_start_failed", "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                            "Failed core proc(s): {'EngineCore_DP0': 1}"),
    ("engine_start_failed", "RuntimeError: Engine process failed to start. See stack trace for the root cause."),
    # --- engine_dead
    ("engine_dead",  # https://github.com/vllm-project/vllm/issues/42362
     "(APIServer pid=1) ERROR 05-12 01:48:42 [api_router.py:72] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
     "encountered an issue. See stack trace (above) for the root cause."),
    ("engine_dead", "(EngineCore pid=5) ERROR 11-30 12:00:00 [core.py:2663] EngineCore encountered a fatal error."),
    ("engine_dead", "(EngineCore pid=5) ERROR 11-30 12:00:00 [multiproc_executor.py:316] Worker proc VllmWorker-0 died "
                    "unexpectedly (exit code: -9), shutting down executor."),
    ("engine_dead", "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already."),
]


@pytest.mark.parametrize("kind, line", FATAL_LINES)
def test_fatal_kind(kind, line):
    event = parse_line(line)
    assert isinstance(event, Fatal), line
    assert event.fatal_kind == kind
    assert event.to_json() == {"kind": "fatal", "fatal_kind": kind, "message": event.message}


def test_fatal_message_is_the_bare_line():
    line = "2026-01-02T03:04:05.123456789Z (EngineCore_DP0 pid=456) \x1b[31mERROR\x1b[0m 01-02 03:04:05 [core.py:1] " \
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    assert parse_line(line) == Fatal("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.")


def test_every_fatal_kind_is_covered():
    assert {kind for kind, _ in FATAL_LINES} == {
        "oom", "gpu_memory_insufficient", "kv_cache_insufficient", "triton_smem", "nccl", "cuda_error",
        "port_in_use", "engine_start_failed", "engine_dead",
    }


@pytest.mark.parametrize(
    "line",
    [
        # Warnings and infos that mention errors: vLLM retries or just advises.
        "(APIServer pid=6117) WARNING 11-30 12:29:48 [system_utils.py:255] Found ulimit of 20000 and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
        "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
        "WARNING 11-30 12:00:00 [parallel.py:746] Address already in use. Retrying with a new port.",
        "INFO 11-30 12:00:00 [network_utils.py:248] Port 8000 is already in use, trying port 8001",
        # https://github.com/verl-project/verl/issues/316: a warning that quotes a CUDA error.
        "(WorkerDict pid=93663) WARNING 02-21 04:32:47 model_runner_base.py:143] Failed to pickle inputs of failed "
        "execution: CUDA error: an illegal memory access was encountered",
        # A traceback's indented source lines, even at ERROR level (https://github.com/vllm-project/vllm/issues/27508).
        "(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708]     raise ValueError(\"No available memory "
        "for the cache blocks. \"",
        "(APIServer pid=1) ERROR 05-12 01:48:42 [api_router.py:72]     raise EngineDeadError()",
        "  File \"/usr/lib/python3.12/site-packages/torch/cuda/memory.py\", line 1, in OutOfMemoryError",
        # A prompt echoed by request logging.
        "(APIServer pid=1) INFO 11-30 12:33:40 [logger.py:50] Received request chatcmpl-1: prompt: 'torch."
        "OutOfMemoryError: CUDA out of memory'",
        # NCCL chatter.
        "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "(EngineCore pid=5) ERROR 11-30 12:00:00 [async_llm.py:710] AsyncLLM output_handler failed.",
        "ValueError: something unrelated",
    ],
)
def test_not_fatal(line):
    assert parse_line(line) is None
