"""The user's model at its real size, without its weights: one TP2 rank of Qwen3.6-27B-AWQ (or the whole model)
served by vLLM's own engine with `load_format=dummy`, on three paths, each measured alone on a quiet GPU.

    python benchmarks/scale_bench.py model --processor-from QWEN3_5_DEMO --out RANK_DIR [--config CFG] [--shape rank]
    python benchmarks/scale_bench.py start PATH RANK_DIR --out-dir OUT [--budget-bytes 22e9] [--mtp 3] [--text-only]
                                     [--name RUN] [--port P] [--draft-vocab K] [--kv-cache-bytes B]
                                     [--prefix-caching off|default] [--enforce-eager]
    python benchmarks/scale_bench.py measure RUN --out-dir OUT [--ttft 4096,16384,32768] [--batches 1,4] [--profile]
                                     (--ttft '' measures decode only)
    python benchmarks/scale_bench.py memory RUN --out-dir OUT
    python benchmarks/scale_bench.py fits RANK_DIR --out-dir OUT [--path proxy-caovan] [--runs mtp3,mtp4,mtp3:text]
                                     [--budget-bytes 22e9] [--timeout 600]
                                     (start + memory for each, one engine at a time on a quiet GPU)
    python benchmarks/scale_bench.py stop RUN --out-dir OUT
    python benchmarks/scale_bench.py report OUT
    python benchmarks/scale_bench.py side-by-side RANK_DIR --out-dir OUT [--runs native,proxy-caovan,proxy-stock]
                                     [--kv-cache-bytes 10000000000]   (all of the above in one command)

PATH is `native` (stock vLLM, the GPU's own code path), `proxy-stock` (stock vLLM on the Turing proxy: Triton's FMA
dots, what a 2080 Ti runs today) or `proxy-caovan` (the Turing proxy with Caovan's defaults: GDNCore, TensorCore75).
All three force the Triton attention backend (for the target and the MTP drafter) and vLLM's Triton GDN prefill: the
kernels a 2080 Ti's vLLM runs, compiled for this GPU (native) or for sm_75 (proxy).

`model` writes the model directory: the real config's text shapes divided by the TP size for a rank (heads, KV heads,
GDN heads, FFN, vocabulary; built as a TP1 model, so one GPU runs one rank's work), the vision tower likewise, the
AWQ config with `visual` left unquantized (vLLM 0.21 cannot shard the tower's 4304-wide MLP into 128-wide groups), and
the tokenizer and processor files of a small Qwen3.5 model (the Qwen3.5 demo) with its special-token ids, so vLLM's
multimodal profiling runs as it does for the real model (the tokenizer gets a filler token for every other id of the
vocabulary, so whatever the dummy weights generate detokenizes). `start` launches `caovan-vllm-serve` in its own
session with every memory setting pinned (the launch profile's shape for a 22 GB card: --max-num-seqs 4,
--max-model-len 80000, --max-num-batched-tokens 2048, MTP=3, a 16-bit KV cache) and the budget given in bytes turned
into --gpu-memory-utilization for this GPU; the engine outlives the command, so a slow start can span several.
With --kv-cache-bytes the KV pool is fixed and vLLM skips its free-memory profiling (which counts every process's
allocations on the GPU), so several engines can start side by side and be measured one after another; a memory fit
leaves it unset and starts alone.
`measure` waits for it, times the first token of prompts of each length (one untimed request per length first:
compiles and autotuning; then 3 timed, fresh random token ids each, so no prefix is cached), the decode step at each
batch size (streamed ignore_eos completions: with dummy weights no draft is accepted, so one step yields one token and
the gap between tokens is the step), and with --profile one 32k prefill and one batch-1 decode under vLLM's torch
profiler, its GPU kernel time by category.
`memory` waits only for vLLM's KV cache lines (the memory fit), records them beside what the launch profile (applied
by `caovan-vllm-serve` in the same start) said vLLM would log, and stops the engine. A fit started by hand passes
`--prefix-caching default` (as a user's start, the installed vLLM's default; `start` pins it off for the timed runs)
and may pass `--enforce-eager` to start in about a minute (the profile then counts no CUDA graph memory); `fits` does
both for each of its runs, one engine at a time. A run is named
RUN (default: its path), results land in OUT/RUN.json; `report` prints the tables.

Timings are of this GPU; on the proxy only ratios between paths carry over to a 2080 Ti (docs/turing-proxy.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caovan_kernels.contract import KV_REPORT_DECISION, is_launcher_line, read_decisions  # noqa: E402
from tests.support.engine import group_alive, stop_group  # noqa: E402

REAL_CONFIG = ROOT / "benchmarks" / "models" / "qwen3_6_27b_awq.json"
PATHS = ("native", "proxy-stock", "proxy-caovan")
SERVED = "rank"
# The engine shape of the launch profile for 2x 2080 Ti 22G, pinned so every path runs the same one (and the profile
# does not re-plan for the GPU it runs on: on an H200 with a 22 GB budget it would choose an fp8 KV cache, which a
# 2080 Ti cannot run). 80,000 tokens: the profile's length before its memory model was corrected; 4 sequences of
# it do not fit (docs/verification.md, "Memory fit"), which only matters for the memory runs.
PROFILE_ARGS = ["--max-num-seqs", "4", "--max-model-len", "80000", "--max-num-batched-tokens", "2048"]
PROCESSOR_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json",
                   "video_preprocessor_config.json", "generation_config.json")
SPECIAL_TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
# GPU kernel names -> category, first match wins (GDN before attention: fla's kernel names say "attn" too). AWQ runs
# through Marlin (Turing's and the bench's choice, below) or machete (vLLM's choice on sm_90), whose kernels are CUTLASS
# device kernels; the fp16 GEMMs (lm_head, the drafter's fc) are cuBLAS's (nvjet, xmma, splitK reduce).
CATEGORIES = (
    ("GDN", re.compile(r"gated_delta|chunk_|fused_recurrent|recurrent_|causal_conv1d|l2norm|solve_tril|recompute_w_u"
                       r"|cumsum|gdn|caovan|fused_sigmoid_gating|kkt|merge_16x16|post_conv", re.I)),
    ("attention", re.compile(r"unified_attention|attn|attention|fmha|flash|reduce_segments", re.I)),
    ("AWQ GEMMs", re.compile(r"marlin|awq|gptq|machete|cutlass::device_kernel", re.I)),
    ("lm_head and dense GEMMs", re.compile(r"gemm|nvjet|xmma|cublas|splitkreduce|sm90_|sm80_|ampere_|turing_", re.I)),
)
# Marlin for AWQ on every path, as on a 2080 Ti (machete needs sm_90): the paths then differ in their Triton kernels.
ENGINE_ENV = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}


# ------------------------------------------------------------------------------------------------------ model

def rank_config(real: dict, tp: int) -> dict:
    """One tensor-parallel rank's share of the real config, as a TP1 model of the same architecture."""
    config = json.loads(json.dumps(real))
    text = config["text_config"]

    def split(section: dict, key: str) -> None:
        if section[key] % tp:
            raise SystemExit(f"{key}={section[key]} does not split over {tp} ranks")
        section[key] //= tp

    for key in ("num_attention_heads", "linear_num_key_heads", "linear_num_value_heads", "intermediate_size",
                "vocab_size"):
        split(text, key)
    text["num_key_value_heads"] = max(1, text["num_key_value_heads"] // tp)  # replicated once TP exceeds them
    vision = config.get("vision_config")
    if vision:
        for key in ("num_heads", "intermediate_size"):
            split(vision, key)
    return config


def write_model(config_path: Path, processor_from: Path, out: Path, shape: str, tp: int) -> None:
    real = json.loads(config_path.read_text())
    config = rank_config(real, tp) if shape == "rank" else real
    demo = json.loads((processor_from / "config.json").read_text())
    for key in SPECIAL_TOKEN_KEYS:  # the demo tokenizer's ids, inside any vocabulary size
        if key in demo:
            config[key] = demo[key]
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in demo.get("text_config", {}):
            config["text_config"][key] = demo["text_config"][key]
    quant = config.get("quantization_config")
    if quant is not None and "visual" not in quant.get("modules_to_not_convert", []):
        quant["modules_to_not_convert"] = [*quant.get("modules_to_not_convert", []), "visual"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for name in PROCESSOR_FILES:
        if (processor_from / name).is_file():
            shutil.copy(processor_from / name, out / name)
    _extend_tokenizer(out / "tokenizer.json", config["text_config"]["vocab_size"])
    text = config["text_config"]
    print(f"{out}: {shape} of {config_path.name} (TP{tp}): {text['num_attention_heads']}/"
          f"{text['num_key_value_heads']} attention heads, {text['linear_num_key_heads']}/"
          f"{text['linear_num_value_heads']} GDN heads, FFN {text['intermediate_size']}, vocab {text['vocab_size']}, "
          f"{text['num_hidden_layers']} layers")


def _extend_tokenizer(path: Path, vocab_size: int) -> None:
    """Give the small tokenizer a token for every id of the vocabulary, so vLLM detokenizes whatever the dummy
    weights pick (vLLM's multimodal processor needs a tokenizer: --skip-tokenizer-init cannot serve this model)."""
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    for token in tokenizer.get("added_tokens", []):  # in the vocabulary, or a larger one would renumber them
        vocab.setdefault(token["content"], token["id"])
    taken = set(vocab.values())
    for token_id in range(vocab_size):
        if token_id not in taken:
            vocab[f"fill{token_id}"] = token_id
    path.write_text(json.dumps(tokenizer))


# ------------------------------------------------------------------------------------------------------ engine

def _files(out_dir: Path, run: str) -> dict[str, Path]:
    return {k: out_dir / f"{run}.{k}" for k in ("log", "engine.json", "json")}


def engine_command(path: str, model: Path, port: int, budget_bytes: float, mtp: int, text_only: bool,
                   profiler_dir: Path, draft_vocab: int | None = None, kv_cache_bytes: int | None = None,
                   prefix_caching: str = "off", enforce_eager: bool = False,
                   cuda_total_bytes: int | None = None, split_kv: bool = True,
                   max_model_len: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The engine's command line and environment. prefix_caching "off" pins it off (the timed runs: every path the
    same); "default" leaves the installed vLLM's default, as a user's start would (0.26 caches prefixes of hybrid
    models, which keeps one more GDN state slot per sequence: the memory fits). The budget in bytes becomes the
    fraction of CUDA's total that vLLM multiplies out again. split_kv False keeps vLLM's attention for the MTP verify
    on the Caovan path too (the stock paths always keep it); max_model_len replaces the profile's 80,000 (a decode
    at a longer context needs room for it)."""
    utilization = budget_bytes / (cuda_total_bytes or machine()["cuda_total_bytes"])
    config: dict = {"caovan": True, "gdn_prefill_backend": "triton"}
    if draft_vocab:
        config["caovan_draft_vocab"] = draft_vocab
    if path != "proxy-caovan":
        config.update(caovan_mode="off", caovan_turing_mma="off", caovan_split_kv="off")
    elif not split_kv:
        config["caovan_split_kv"] = "off"
    profile_args = list(PROFILE_ARGS)
    if max_model_len:
        profile_args[profile_args.index("--max-model-len") + 1] = str(max_model_len)
    spec = {"method": "mtp", "num_speculative_tokens": mtp, "attention_backend": "TRITON_ATTN"}
    args = [sys.executable, "-m", "caovan_kernels.serve", str(model.resolve()), "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", SERVED, "--load-format", "dummy",
            "--dtype", "half", "--kv-cache-dtype", "auto", "--quantization", "awq_marlin",
            "--attention-backend", "TRITON_ATTN", "--gpu-memory-utilization", f"{utilization:.6f}",
            "--speculative-config", json.dumps(spec), *profile_args,
            "--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(profiler_dir.resolve()),
                                             "torch_profiler_with_stack": False}),
            "--additional-config", json.dumps(config)]
    if prefix_caching == "off":
        args.append("--no-enable-prefix-caching")
    elif prefix_caching != "default":
        raise SystemExit(f"--prefix-caching {prefix_caching!r}: expected off or default")
    if enforce_eager:
        args.append("--enforce-eager")
    if text_only:
        args.append("--language-model-only")
    if kv_cache_bytes:
        args += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **ENGINE_ENV}
    if path.startswith("proxy"):
        env["CAOVAN_TURING_PROXY"] = "triton"  # the sm_75 code path; torch.compile still sees the real GPU
    return args, env


def machine_facts() -> dict:
    """The GPU and the vLLM a result is taken with, and GPU 0's memory as NVML counts it (what the launch profile
    reads: its total, what the driver holds) and as CUDA does (vLLM's budget is a fraction of CUDA's total). Meant
    for a one-GPU machine, where NVML's GPU 0 is CUDA's."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    from caovan_kernels.profile import detect_gpus

    try:
        vllm = version("vllm")
    except PackageNotFoundError:
        vllm = None
    nvml = detect_gpus().gpus
    free, total = torch.cuda.mem_get_info()
    return {"gpu": torch.cuda.get_device_name(), "cuda_total_bytes": total, "cuda_free_bytes": free,
            "nvml_total_bytes": nvml[0].total_bytes if nvml else None,
            "nvml_reserved_bytes": nvml[0].reserved_bytes if nvml else None, "vllm": vllm}


def machine() -> dict:
    """machine_facts() read in a child process, so a caller that outlives engines holds no CUDA context beside them."""
    child = subprocess.run([sys.executable, __file__, "machine"], capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"could not read the GPU's facts:\n{child.stderr[-2000:]}")
    return json.loads(child.stdout.splitlines()[-1])


def wait_for_quiet_gpu(timeout_s: float = 180, allowed_bytes: int = 1 << 30) -> None:
    """Until GPU 0 holds less than allowed_bytes for processes (engines just stopped release theirs in seconds): a
    memory fit's profile counts whatever any process allocates or frees while it runs."""
    from caovan_kernels.profile import detect_gpus

    deadline = time.monotonic() + timeout_s
    while True:
        inventory = detect_gpus()
        if not inventory.gpus:
            raise SystemExit(f"cannot watch GPU 0's memory: {inventory.source}")
        gpu = inventory.gpus[0]
        held = gpu.cuda_total_bytes - gpu.free_bytes
        if held < allowed_bytes:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"GPU 0 still holds {held / 2**30:.2f} GiB after {timeout_s:.0f} s: stop what runs on it "
                             "(nvidia-smi) before a memory fit")
        time.sleep(1)


def start(path: str, model: Path, out_dir: Path, budget_bytes: float, mtp: int, text_only: bool, run: str,
          draft_vocab: int | None = None, kv_cache_bytes: int | None = None, port: int | None = None,
          prefix_caching: str = "off", enforce_eager: bool = False, split_kv: bool = True,
          max_model_len: int | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = _files(out_dir, run)
    port = port or 8100 + PATHS.index(path)
    facts = machine()
    command, env = engine_command(path, model, port, budget_bytes, mtp, text_only, out_dir / f"{run}.trace",
                                  draft_vocab, kv_cache_bytes, prefix_caching, enforce_eager,
                                  facts["cuda_total_bytes"], split_kv, max_model_len)
    process = subprocess.Popen(command, stdout=files["log"].open("wb"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True, cwd=out_dir)
    # Reap the engine as soon as it exits, so a command that goes on (fits, side-by-side) sees it gone: an unreaped
    # leader stays a zombie, which still counts as a live process group.
    threading.Thread(target=process.wait, daemon=True).start()
    files["engine.json"].write_text(json.dumps({"path": path, "pid": process.pid, "port": port, "started": time.time(),
                                                "budget_bytes": budget_bytes, "mtp": mtp, "text_only": text_only,
                                                "draft_vocab": draft_vocab, "kv_cache_bytes": kv_cache_bytes,
                                                "prefix_caching": prefix_caching, "enforce_eager": enforce_eager,
                                                "split_kv": split_kv, "max_model_len": max_model_len,
                                                **facts, "command": command}))
    print(f"{run}: {path} engine pid {process.pid} on port {port}, log {files['log']}")


def stop(path: str, out_dir: Path) -> None:
    stop_group(json.loads(_files(out_dir, path)["engine.json"].read_text())["pid"])
    print(f"{path}: stopped")


# ------------------------------------------------------------------------------------------------------ measure

def _wait_ready(path: str, out_dir: Path, timeout_s: float) -> tuple[str, float]:
    files = _files(out_dir, path)
    meta = json.loads(files["engine.json"].read_text())
    base = f"http://127.0.0.1:{meta['port']}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(meta["pid"]):
            raise SystemExit(f"{path}: the engine exited; log tail:\n{files['log'].read_text()[-4000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return base, time.time() - meta["started"]
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{path}: not ready after {timeout_s:.0f} s")


FIRST_PLAIN_ID = 1024  # below: the small tokenizer's own tokens, among them the vision placeholders


def _prompt(tokens: int, rng: random.Random, vocab: int) -> list[int]:
    return [rng.randrange(FIRST_PLAIN_ID, vocab) for _ in range(tokens)]


def _stream(client: httpx.Client, base: str, prompt: list[int], max_tokens: int,
            arrivals: list[float] | None = None) -> list[float]:
    """Arrival times (perf_counter) of each streamed token chunk of one completion, appended to `arrivals` as they
    come when given."""
    arrivals = [] if arrivals is None else arrivals
    with client.stream("POST", f"{base}/v1/completions", json={
            "model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                arrivals.append(time.perf_counter())
    return arrivals


def time_to_first_token(client: httpx.Client, base: str, tokens: int, rng: random.Random, vocab: int) -> float:
    t0 = time.perf_counter()
    arrivals = _stream(client, base, _prompt(tokens, rng, vocab), 1)
    return arrivals[0] - t0


def decode_step_ms(base: str, batch: int, rng: random.Random, vocab: int, tokens: int = 64,
                   context: int = 256) -> float:
    """Median gap between tokens over `batch` concurrent streams of prompts of `context` tokens (the first few gaps
    left out: batch joining)."""
    import concurrent.futures

    prompts = [_prompt(context, rng, vocab) for _ in range(batch)]
    with httpx.Client(timeout=600) as client, concurrent.futures.ThreadPoolExecutor(batch) as pool:
        runs = list(pool.map(lambda p: _stream(client, base, p, tokens), prompts))
    gaps = [(b - a) * 1000 for arrivals in runs for a, b in zip(arrivals[4:], arrivals[5:])]
    return statistics.median(gaps)


def _profiled(base: str, trace_dir: Path, action) -> dict[str, float]:
    """GPU kernel milliseconds by category while `action` runs under vLLM's torch profiler."""
    before = set(trace_dir.glob("**/*.pt.trace.json*")) if trace_dir.exists() else set()
    httpx.post(f"{base}/start_profile", timeout=60).raise_for_status()
    action()
    httpx.post(f"{base}/stop_profile", timeout=600).raise_for_status()
    return _newest_trace(trace_dir, before)


def _profiled_decode(base: str, trace_dir: Path, rng: random.Random, vocab: int, steps: int) -> tuple[dict, int]:
    """GPU kernel milliseconds by category over decode steps only (the profiler starts after the first tokens, so
    the prompt's prefill is not in the window), and how many steps the window held."""
    import threading

    arrivals: list[float] = []  # appended as tokens stream in

    def generate() -> None:
        with httpx.Client(timeout=1200) as client:
            _stream(client, base, _prompt(256, rng, vocab), steps * 4, arrivals)

    stream = threading.Thread(target=generate)
    before = set(trace_dir.glob("**/*.pt.trace.json*")) if trace_dir.exists() else set()
    stream.start()
    while len(arrivals) < 8 and stream.is_alive():
        time.sleep(0.01)
    httpx.post(f"{base}/start_profile", timeout=60).raise_for_status()
    first = len(arrivals)
    while len(arrivals) < first + steps and stream.is_alive():
        time.sleep(0.01)
    held = len(arrivals) - first  # read before stopping: the stream goes on while the trace is written
    httpx.post(f"{base}/stop_profile", timeout=600).raise_for_status()
    stream.join()
    return _newest_trace(trace_dir, before), held


def _newest_trace(trace_dir: Path, before: set[Path]) -> dict[str, float]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        new = sorted(set(trace_dir.glob("**/*.pt.trace.json*")) - before, key=lambda p: p.stat().st_mtime)
        workers = [p for p in new if "async_llm" not in p.name]
        if workers:
            time.sleep(2)  # the writer may still be closing the file
            return kernel_time_by_category(workers[-1])
        time.sleep(1)
    raise SystemExit(f"no profiler trace appeared in {trace_dir}")


def kernel_time_by_category(trace: Path) -> dict[str, float]:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    totals: dict[str, float] = defaultdict(float)
    for event in events:
        if event.get("cat") != "kernel":
            continue
        name = event.get("name", "")
        category = next((label for label, pattern in CATEGORIES if pattern.search(name)), "other")
        totals[category] += event.get("dur", 0) / 1000
    return dict(totals)


def memory(path: str, out_dir: Path, timeout_s: float) -> None:
    """Wait for vLLM's KV cache size lines, record them with the engine's memory lines, stop the engine."""
    files = _files(out_dir, path)
    meta = json.loads(files["engine.json"].read_text())
    deadline = time.monotonic() + timeout_s
    facts = engine_log_facts("")
    while time.monotonic() < deadline:
        facts = engine_log_facts(files["log"].read_text(errors="replace"))
        if facts["max_concurrency"] or not group_alive(meta["pid"]):
            break
        time.sleep(2)
    stop(path, out_dir)
    keys = ("mtp", "text_only", "budget_bytes", "prefix_caching", "enforce_eager", "gpu", "cuda_total_bytes",
            "nvml_total_bytes", "nvml_reserved_bytes", "vllm")
    files["json"].write_text(json.dumps({"run": path, **{k: meta.get(k) for k in keys}, "log": facts}, indent=1))
    print(f"{path}: vLLM logged {facts['kv_cache_tokens']} tokens, concurrency {facts['max_concurrency']}; "
          f"the launch profile predicted {facts['predicted_kv_cache_tokens']} tokens, "
          f"concurrency {facts['predicted_concurrency']}")


def measure(path: str, out_dir: Path, ttft: list[int], batches: list[int], profile: bool, timeout_s: float,
            seed: int, decode_contexts: list[int] = ()) -> None:
    files = _files(out_dir, path)
    base, ready_s = _wait_ready(path, out_dir, timeout_s)
    meta = json.loads(files["engine.json"].read_text())
    model_config = json.loads((Path(meta["command"][3]) / "config.json").read_text())
    vocab = model_config["text_config"]["vocab_size"]
    rng = random.Random(seed)
    print(f"{path}: ready after {ready_s:.0f} s (seed {seed})")
    result: dict = {"path": meta["path"], "run": path, "mtp": meta["mtp"], "ready_s": ready_s, "seed": seed,
                    "split_kv": meta.get("split_kv", True) and meta["path"] == "proxy-caovan",
                    "ttft_s": {}, "decode_ms": {}, "decode_at_context_ms": {},
                    "log": engine_log_facts(files["log"].read_text(errors="replace"))}
    with httpx.Client(timeout=1200) as client:
        for tokens in ttft:
            time_to_first_token(client, base, tokens, rng, vocab)  # compiles and autotunes for this length
            times = [time_to_first_token(client, base, tokens, rng, vocab) for _ in range(3)]
            result["ttft_s"][tokens] = times
            print(f"{path}: TTFT {tokens} tokens: {', '.join(f'{t:.3f}' for t in times)} s")
    for batch in batches:
        decode_step_ms(base, batch, rng, vocab, tokens=16)  # warm-up
        result["decode_ms"][batch] = [decode_step_ms(base, batch, rng, vocab) for _ in range(2)]
        print(f"{path}: decode batch {batch}: {result['decode_ms'][batch]} ms per step")
    for context in decode_contexts:
        # One stream per context (its prompt's prefill is the cost: minutes at 128k on the stock proxy); the decode
        # graphs were captured at start-up and the prefill runs in fixed chunks, so nothing compiles here.
        result["decode_at_context_ms"][context] = decode_step_ms(base, 1, rng, vocab, tokens=64, context=context)
        print(f"{path}: decode batch 1 at {context} tokens of context: {result['decode_at_context_ms'][context]:.2f} "
              "ms per step", flush=True)
        files["json"].write_text(json.dumps(result, indent=1))  # kept if a longer context does not finish
    if profile:
        trace_dir = out_dir / f"{path}.trace"
        if ttft:  # the longest prompt's prefill
            with httpx.Client(timeout=1200) as client:
                longest = max(ttft)
                result["profile_prefill_ms"] = _profiled(
                    base, trace_dir, lambda: time_to_first_token(client, base, longest, rng, vocab))
                result["profile_prefill_tokens"] = longest
        result["profile_decode_ms"], result["profile_decode_steps"] = _profiled_decode(
            base, trace_dir, rng, vocab, steps=64)
        print(f"{path}: prefill {result.get('profile_prefill_ms')}, decode {result['profile_decode_ms']}")
    result["log"] = engine_log_facts(files["log"].read_text(errors="replace"))
    files["json"].write_text(json.dumps(result, indent=1))


def plan_runs(runs: list[str]) -> list[tuple[str, str, int | None, int, bool]]:
    """(name, path, DraftVocab ids or None, port, split-KV verify) for each PATH, PATH:dvK or proxy-caovan:nosplit;
    a clear error for anything else."""
    plan = []
    for i, spec in enumerate(runs):
        path, _, option = spec.partition(":")
        nosplit = option == "nosplit" and path == "proxy-caovan"
        if path not in PATHS or (option and not nosplit and not re.fullmatch(r"dv[1-9]\d*", option)):
            raise SystemExit(f"run {spec!r}: expected PATH, PATH:dvK or proxy-caovan:nosplit, PATH one of "
                             f"{', '.join(PATHS)}")
        dv = int(option[2:]) if option and not nosplit else None
        plan.append((f"{path}-{option}" if option else path, path, dv, 8100 + i, not nosplit))
    if len({name for name, *_ in plan}) != len(plan):
        raise SystemExit("each run may be given once")
    return plan


def side_by_side(model: Path, out_dir: Path, runs: list[str], kv_cache_bytes: int, budget_bytes: float,
                 timeout_s: float, seed: int, ttft: list[int] = (4096, 16384, 32768), batches: list[int] = (1, 4),
                 decode_contexts: list[int] = (), max_model_len: int | None = None, profile: bool = True) -> None:
    """Start every run at once with the KV pool pinned (so vLLM's memory profile, which reads the whole GPU, is out of
    the way), wait until all serve (compiling and autotuning done: the GPU is quiet), then measure each alone with
    the others idle, stop it, and print the report. A run is PATH, PATH:dvK (DraftVocab over K ids, decode only) or
    proxy-caovan:nosplit (vLLM's attention for the MTP verify). Whatever fails, no engine is left running."""
    plan = plan_runs(runs)
    running: list[str] = []
    try:
        for name, path, draft_vocab, port, split_kv in plan:
            start(path, model, out_dir, budget_bytes, 3, False, name, draft_vocab, kv_cache_bytes, port,
                  split_kv=split_kv, max_model_len=max_model_len)
            running.append(name)
        deadline = time.monotonic() + timeout_s
        for name in running:
            _wait_ready(name, out_dir, max(1.0, deadline - time.monotonic()))
            print(f"{name}: serving")
        for name, _, draft_vocab, _, _ in plan:
            try:
                measure(name, out_dir, [] if draft_vocab else list(ttft), list(batches), profile, 60, seed,
                        [] if draft_vocab else list(decode_contexts))
            except SystemExit as exc:  # one engine's failure leaves the others to be measured
                print(f"{name}: not measured: {exc}")
            stop(name, out_dir)
            running.remove(name)
    finally:
        for name in running:
            stop(name, out_dir)
    report(out_dir)


FIT_SPEC = re.compile(r"mtp([1-9])((?::(?:text|graphs))*)")


def plan_fits(specs: list[str]) -> list[tuple[str, int, bool, bool]]:
    """(name, MTP, text only, CUDA graphs) for each `mtpN[:text][:graphs]`; a clear error for anything else."""
    plan = []
    for spec in specs:
        found = FIT_SPEC.fullmatch(spec)
        if not found:
            raise SystemExit(f"fit {spec!r}: expected mtpN with :text and/or :graphs, e.g. mtp3, mtp4, mtp3:text")
        options = set(found.group(2).split(":")) - {""}
        plan.append(("fit-" + spec.replace(":", "-"), int(found.group(1)), "text" in options, "graphs" in options))
    if len({name for name, *_ in plan}) != len(plan):
        raise SystemExit("each fit may be given once")
    return plan


def fits(model: Path, out_dir: Path, path: str, specs: list[str], budget_bytes: float, timeout_s: float) -> None:
    """Memory fits one after another, each engine alone on a quiet GPU (vLLM's memory profile counts every process's
    allocations), prefix caching as the installed vLLM does by default, without CUDA graphs unless `:graphs` (a start
    in about a minute instead of five; the launch profile then counts no graph memory either). Prints the table."""
    for name, mtp, text_only, graphs in plan_fits(specs):
        wait_for_quiet_gpu()
        start(path, model, out_dir, budget_bytes, mtp, text_only, name, port=8100, prefix_caching="default",
              enforce_eager=not graphs)
        try:
            memory(name, out_dir, timeout_s)  # stops the engine once it has logged its KV cache (or died)
        finally:
            stop(name, out_dir)  # whatever interrupted the wait, no engine is left running
    report(out_dir)


LOG_FACTS = {
    "kv_cache_tokens": (r"GPU KV cache size: ([\d,]+) tokens", lambda s: int(s.replace(",", ""))),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", float),
    "available_kv_gib": (r"Available KV cache memory: ([\d.]+) GiB", float),
    "model_load_gib": (r"Model loading took ([\d.]+) GiB", float),
    "init_engine_s": (r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", float),
    "attention_backends": (r"Using (\w+) (?:attention )?backend", str),
    "tensorcore75_counts": (r"\[Caovan TensorCore75\] (kernels=\d+ retargeted=\d+ kept=\d+ \([^)]*\))", str),
    "tensorcore75_retargeted": (r"\[Caovan TensorCore75\] retargeted kernels \((\d+)\)", int),
}


def profile_prediction(log: str) -> tuple[int | None, float | None]:
    """What the launch profile (its decisions line in the same log) said vLLM would log: KV cache tokens and the
    maximum concurrency."""
    for line in log.splitlines():
        decisions = read_decisions(line)
        for decision in (decisions or {}).get("decisions", []):
            if decision["name"] == KV_REPORT_DECISION:
                tokens = re.fullmatch(r"(\d+) tokens", decision["value"])
                concurrency = re.search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
                                        decision["reason"])
                return (int(tokens.group(1)) if tokens else None,
                        float(concurrency.group(1)) if concurrency else None)
    return None, None


def engine_log_facts(log: str) -> dict:
    facts = {}
    # vLLM's own lines only: the launcher's decisions (its decisions line and the line it prints for each) quote the
    # lines they predict.
    engine = "\n".join(line for line in log.splitlines() if not is_launcher_line(line))
    for name, (pattern, convert) in LOG_FACTS.items():
        found = [convert(m.group(1)) for m in re.finditer(pattern, engine)]
        facts[name] = found
    facts["predicted_kv_cache_tokens"], facts["predicted_concurrency"] = profile_prediction(log)
    facts["memory_lines"] = [line.split("] ", 1)[-1] for line in engine.splitlines()
                             if re.search(r"memory|KV cache|CUDA graph|cudagraph", line, re.I)
                             and "WARNING" not in line][:40]
    return facts


# ------------------------------------------------------------------------------------------------------ report

def report(out_dir: Path) -> None:
    runs = [json.loads(f.read_text()) for f in sorted(out_dir.glob("*.json")) if not f.name.endswith(".engine.json")]
    results = {r["run"]: r for r in runs if "ttft_s" in r}  # measured runs; the others are memory fits
    fits = [r for r in runs if "ttft_s" not in r]
    if not results and not fits:
        raise SystemExit(f"no results in {out_dir}")
    lengths = sorted({int(k) for r in results.values() for k in r["ttft_s"]})
    batches = sorted({int(k) for r in results.values() for k in r["decode_ms"]})
    # vLLM's own start time (profile, KV cache, warm-up): the time until `measure` first saw the engine healthy
    # says nothing when engines started side by side and waited to be measured one at a time.
    if results:
        print("| path | vLLM init (s) | " + " | ".join(f"TTFT {n // 1024}k (s)" for n in lengths) + " | "
              + " | ".join(f"decode b{b} (ms/step)" for b in batches) + " |")
        print("| --- " * (2 + len(lengths) + len(batches)) + "|")
    for path, r in results.items():
        ttft = [statistics.median(r["ttft_s"][str(n)]) if str(n) in r["ttft_s"] else float("nan") for n in lengths]
        dec = [statistics.median(r["decode_ms"][str(b)]) if str(b) in r["decode_ms"] else float("nan")
               for b in batches]
        init = r["log"].get("init_engine_s") or [float("nan")]
        print(f"| {path} | {init[-1]:.0f} | " + " | ".join(f"{t:.3f}" for t in ttft) + " | "
              + " | ".join(f"{d:.2f}" for d in dec) + " |")
    contexts = sorted({int(k) for r in results.values() for k in r.get("decode_at_context_ms", {})})
    if contexts:
        print("\nDecode step at batch 1 by context (ms per step; MTP=3, dummy weights: every step verifies 4 tokens):")
        print("| path | split-KV verify | " + " | ".join(f"{n // 1024}k" for n in contexts)
              + f" | {contexts[-1] // 1024}k / {contexts[0] // 1024}k |")
        print("| --- " * (3 + len(contexts)) + "|")
        for path, r in results.items():
            steps = [r.get("decode_at_context_ms", {}).get(str(n)) for n in contexts]
            ratio = f"{steps[-1] / steps[0]:.2f}x" if steps[0] and steps[-1] else "-"
            print(f"| {path} | {'yes' if r.get('split_kv') else 'no'} | "
                  + " | ".join("-" if s is None else f"{s:.2f}" for s in steps) + f" | {ratio} |")
    for kind in ("prefill", "decode"):
        rows = {p: r.get(f"profile_{kind}_ms") for p, r in results.items() if r.get(f"profile_{kind}_ms")}
        if not rows:
            continue
        per = {p: max(1, results[p]["profile_decode_steps"]) if kind == "decode" else 1 for p in rows}
        labels = [label for label, _ in CATEGORIES] + ["other"]
        print(f"\nGPU kernel time per {'step' if kind == 'decode' else 'request'}, {kind} (ms, share):")
        print("| path | " + " | ".join(labels) + " | total |")
        print("| --- " * (len(labels) + 2) + "|")
        for p, cats in rows.items():
            total = sum(cats.values())
            cells = [f"{cats.get(label, 0) / per[p]:.2f} ({100 * cats.get(label, 0) / total:.0f}%)" for label in labels]
            print(f"| {p} | " + " | ".join(cells) + f" | {total / per[p]:.2f} |")
    for r in results.values():
        facts, path = r["log"], r["run"]
        print(f"\n{path}: KV cache {facts['kv_cache_tokens']} tokens, concurrency {facts['max_concurrency']}, "
              f"backends {sorted(set(facts['attention_backends']))}, TensorCore75 {facts['tensorcore75_counts'][-1:]}")
    if fits:
        print("\nMemory fits: what vLLM logged against what the launch profile predicted in the same start:")
        print(fit_table(fits))


def fit_table(fits: list[dict]) -> str:
    rows = ["| run | vLLM | MTP | text only | CUDA graphs | prefix caching | weights (GiB) | KV memory (GiB) "
            "| KV tokens logged | predicted | predicted / logged | concurrency logged | predicted |",
            "| --- " * 13 + "|"]
    totals = {(r.get("gpu"), r.get("cuda_total_bytes"), r.get("nvml_total_bytes"), r.get("nvml_reserved_bytes"))
              for r in fits}
    for r in fits:
        facts = r["log"]
        logged = (facts["kv_cache_tokens"] or [None])[-1]
        predicted = facts.get("predicted_kv_cache_tokens")
        ratio = f"{predicted / logged:.3f}" if logged and predicted else "-"
        cells = [r["run"], r.get("vllm") or "?", r["mtp"], "yes" if r["text_only"] else "no",
                 "no" if r.get("enforce_eager") else "yes", r.get("prefix_caching") or "off",
                 (facts["model_load_gib"] or ["-"])[-1], (facts["available_kv_gib"] or ["-"])[-1],
                 logged if logged is not None else "not logged", predicted if predicted is not None else "-", ratio,
                 (facts["max_concurrency"] or ["-"])[-1], facts.get("predicted_concurrency") or "-"]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    for gpu, cuda, nvml, reserved in sorted(totals, key=str):
        rows.append(f"\n{gpu}: CUDA's total {cuda} B, NVML's {nvml} B of which the driver holds {reserved} B "
                    "(the launch profile budgets on NVML's total minus what the driver holds)")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model")
    m.add_argument("--config", type=Path, default=REAL_CONFIG)
    m.add_argument("--processor-from", type=Path, required=True, help="a Qwen3.5 model dir (the Qwen3.5 demo)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--shape", choices=("rank", "full"), default="rank")
    m.add_argument("--tp", type=int, default=2)
    s = sub.add_parser("start")
    s.add_argument("path", choices=PATHS)
    s.add_argument("model", type=Path)
    s.add_argument("--out-dir", type=Path, required=True)
    s.add_argument("--budget-bytes", type=float, default=22e9)
    s.add_argument("--mtp", type=int, default=3)
    s.add_argument("--text-only", action="store_true")
    s.add_argument("--name", help="the run's name (default: the path)")
    s.add_argument("--kv-cache-bytes", type=int, default=None,
                   help="a fixed KV pool: vLLM then skips its free-memory profiling, which other engines starting "
                        "beside this one would upset (engines can start side by side); leave unset for a memory fit")
    s.add_argument("--port", type=int, default=None, help="default: 8100 + the path's index")
    s.add_argument("--draft-vocab", type=int, default=None,
                   help="DraftVocab: the drafter scores this many ids (tokenizer order; caovan_draft_vocab)")
    s.add_argument("--prefix-caching", choices=("off", "default"), default="off",
                   help="off (the timed runs) or the installed vLLM's default (a memory fit as a user starts it)")
    s.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs: a memory fit in about a minute")
    s.add_argument("--no-split-kv", action="store_true", help="proxy-caovan: vLLM's attention for the MTP verify")
    s.add_argument("--max-model-len", type=int, default=None, help="instead of the profile's 80,000 tokens")
    fi = sub.add_parser("fits")
    fi.add_argument("model", type=Path)
    fi.add_argument("--out-dir", type=Path, required=True)
    fi.add_argument("--path", choices=PATHS, default="proxy-caovan")
    fi.add_argument("--runs", default="mtp3,mtp4,mtp3:text",
                    help="mtpN[:text][:graphs], comma-separated (e.g. mtp3,mtp4,mtp3:text,mtp3:graphs)")
    fi.add_argument("--budget-bytes", type=float, default=22e9)
    fi.add_argument("--timeout", type=float, default=600, help="seconds for each engine to log its KV cache")
    sub.add_parser("machine", help="print the GPU's and vLLM's facts as JSON")
    mem = sub.add_parser("memory")
    mem.add_argument("path", metavar="RUN")
    mem.add_argument("--out-dir", type=Path, required=True)
    mem.add_argument("--timeout", type=float, default=600)
    me = sub.add_parser("measure")
    me.add_argument("path", metavar="RUN")
    me.add_argument("--out-dir", type=Path, required=True)
    me.add_argument("--ttft", default="4096,16384,32768")
    me.add_argument("--batches", default="1,4")
    me.add_argument("--profile", action="store_true")
    me.add_argument("--timeout", type=float, default=900)
    me.add_argument("--seed", type=int, default=None)
    me.add_argument("--decode-contexts", default="", help="decode at batch 1 after prompts of these lengths")
    st = sub.add_parser("stop")
    st.add_argument("path", metavar="RUN")
    st.add_argument("--out-dir", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("out_dir", type=Path)
    sb = sub.add_parser("side-by-side")
    sb.add_argument("model", type=Path)
    sb.add_argument("--out-dir", type=Path, required=True)
    sb.add_argument("--runs", default="native,proxy-caovan,proxy-stock",
                    help="PATH or PATH:dvK, comma-separated (e.g. native,native:dv32768,proxy-caovan,proxy-stock)")
    sb.add_argument("--kv-cache-bytes", type=int, default=10_000_000_000)
    sb.add_argument("--budget-bytes", type=float, default=22e9)
    sb.add_argument("--timeout", type=float, default=1500, help="seconds for every engine to serve")
    sb.add_argument("--seed", type=int, default=None)
    sb.add_argument("--ttft", default="4096,16384,32768", help="prompt lengths to time to first token ('' for none)")
    sb.add_argument("--batches", default="1,4", help="decode batch sizes ('' for none)")
    sb.add_argument("--decode-contexts", default="",
                    help="decode at batch 1 after prompts of these lengths, e.g. 4096,32768,65536,131072")
    sb.add_argument("--max-model-len", type=int, default=None,
                    help="instead of the profile's 80,000 tokens (the longest decode context needs room)")
    sb.add_argument("--no-profile", action="store_true", help="skip the torch-profiler breakdown")
    a = parser.parse_args()
    if a.command == "model":
        write_model(a.config, a.processor_from, a.out, a.shape, a.tp)
    elif a.command == "start":
        start(a.path, a.model, a.out_dir, a.budget_bytes, a.mtp, a.text_only, a.name or a.path, a.draft_vocab,
              a.kv_cache_bytes, a.port, a.prefix_caching, a.enforce_eager, not a.no_split_kv, a.max_model_len)
    elif a.command == "memory":
        memory(a.path, a.out_dir, a.timeout)
    elif a.command == "fits":
        fits(a.model, a.out_dir, a.path, [r for r in a.runs.split(",") if r], a.budget_bytes, a.timeout)
    elif a.command == "machine":
        print(json.dumps(machine_facts()))
    elif a.command == "measure":
        seed = a.seed if a.seed is not None else random.randrange(1 << 30)
        measure(a.path, a.out_dir, [int(x) for x in a.ttft.split(",") if x],
                [int(x) for x in a.batches.split(",") if x], a.profile, a.timeout, seed,
                [int(x) for x in a.decode_contexts.split(",") if x])
    elif a.command == "stop":
        stop(a.path, a.out_dir)
    elif a.command == "side-by-side":
        seed = a.seed if a.seed is not None else random.randrange(1 << 30)
        side_by_side(a.model, a.out_dir, [r for r in a.runs.split(",") if r], a.kv_cache_bytes, a.budget_bytes,
                     a.timeout, seed, [int(x) for x in a.ttft.split(",") if x],
                     [int(x) for x in a.batches.split(",") if x], [int(x) for x in a.decode_contexts.split(",") if x],
                     a.max_model_len, not a.no_profile)
    else:
        report(a.out_dir)


if __name__ == "__main__":
    main()
